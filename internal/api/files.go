package api

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
)

// multipartOverhead is room for the form's other fields and boundaries.
const multipartOverhead = 256 << 10

// form is a parsed multipart request: small fields and one file part.
type form struct {
	fields   map[string]string
	filename string
	data     []byte
}

// readForm reads a multipart body holding the file part fileField of at
// most files.PartLimit bytes. Anything bigger is refused with 413 before it
// is all read.
func readForm(r *http.Request, fileField string) (form, error) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		return form{}, errs.E(errs.Invalid, errs.CodeMultipart, "", "send multipart/form-data with a boundary (fields: purpose, %s)", fileField)
	}
	if r.ContentLength > files.PartLimit+multipartOverhead {
		return form{}, tooBig(r.ContentLength)
	}
	mr := multipart.NewReader(http.MaxBytesReader(nil, r.Body, files.PartLimit+multipartOverhead), params["boundary"])
	f := form{fields: map[string]string{}}
	seenFile := false
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return form{}, tooBig(r.ContentLength)
			}
			return form{}, errs.E(errs.Invalid, errs.CodeMultipart, "", "malformed multipart body: %v", err)
		}
		name := p.FormName()
		if name == fileField {
			if seenFile {
				return form{}, errs.E(errs.Invalid, errs.CodeMultipart, fileField, "send exactly one %q part", fileField)
			}
			seenFile = true
			f.filename = rawFilename(p)
			var buf bytes.Buffer
			n, err := io.Copy(&buf, io.LimitReader(p, files.PartLimit+1))
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					return form{}, tooBig(r.ContentLength)
				}
				return form{}, errs.E(errs.Invalid, errs.CodeMultipart, fileField, "malformed multipart body: %v", err)
			}
			if n > files.PartLimit {
				return form{}, tooBig(n)
			}
			f.data = buf.Bytes()
			continue
		}
		v, err := io.ReadAll(io.LimitReader(p, 64<<10+1))
		if err != nil {
			return form{}, errs.E(errs.Invalid, errs.CodeMultipart, name, "malformed multipart body: %v", err)
		}
		if len(v) > 64<<10 {
			return form{}, errs.Invalidf(name, "field %q is too long", name)
		}
		f.fields[name] = string(v)
	}
	if !seenFile {
		return form{}, errs.Missingf(fileField, "the multipart body has no %q part", fileField)
	}
	return f, nil
}

// rawFilename is the filename parameter as sent. Part.FileName passes it
// through filepath.Base, which would hide "../../x.jsonl" from
// files.CleanFilename instead of letting it refuse the name.
func rawFilename(p *multipart.Part) string {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}

func tooBig(n int64) error {
	return errs.E(errs.TooLarge, "request_too_large", "file",
		"%d bytes is more than one request may carry (at most %d bytes of file data, 4 MiB): upload bigger files with the Uploads API (POST /v1/uploads, parts of at most 4 MiB) or a presigned upload", n, files.PartLimit)
}

// expiresAfter reads expires_after as form fields or a JSON object.
func expiresAfter(fields map[string]string) (int64, error) {
	anchor, secs := fields["expires_after[anchor]"], fields["expires_after[seconds]"]
	if secs == "" {
		return 0, nil
	}
	if anchor != "" && anchor != "created_at" {
		return 0, errs.Invalidf("expires_after.anchor", "expires_after.anchor must be created_at")
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return 0, errs.Invalidf("expires_after.seconds", "expires_after.seconds must be an integer")
	}
	return n, nil
}

type expiresAfterJSON struct {
	Anchor  string `json:"anchor"`
	Seconds int64  `json:"seconds"`
}

func (e *expiresAfterJSON) seconds(param string) (int64, error) {
	if e == nil {
		return 0, nil
	}
	if e.Anchor != "created_at" {
		return 0, errs.Invalidf(param+".anchor", "%s.anchor must be created_at", param)
	}
	return e.Seconds, nil
}

// presignRequest is the JSON body of the presigned-upload extension.
type presignRequest struct {
	Filename     string            `json:"filename"`
	Purpose      string            `json:"purpose"`
	Bytes        int64             `json:"bytes"`
	ExpiresAfter *expiresAfterJSON `json:"expires_after"`
}

func (a *API) createFile(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var req presignRequest
		if err := decodeJSON(r, 64<<10, &req); err != nil {
			return err
		}
		exp, err := req.ExpiresAfter.seconds("expires_after")
		if err != nil {
			return err
		}
		f, err := a.Files.Presign(r.Context(), p.Tenant, req.Filename, req.Purpose, req.Bytes, exp)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, f)
	}
	form, err := readForm(r, "file")
	if err != nil {
		return err
	}
	exp, err := expiresAfter(form.fields)
	if err != nil {
		return err
	}
	f, err := a.Files.Create(r.Context(), p.Tenant, form.filename, form.fields["purpose"], int64(len(form.data)), exp, bytes.NewReader(form.data))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, f)
}

func (a *API) listFiles(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	q := r.URL.Query()
	page := file.Page{After: q.Get("after"), Order: q.Get("order"), Filter: q.Get("purpose")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return errs.Invalidf("limit", "limit must be an integer between 1 and 10000")
		}
		page.Limit = n
	}
	fs, more, err := a.Files.List(r.Context(), p.Tenant, page)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(fs, more, func(f file.File) string { return f.ID }))
}

func (a *API) getFile(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	f, err := a.Files.Get(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, f)
}

func (a *API) fileContent(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	f, body, err := a.Files.Content(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(f.Bytes, 10))
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}))
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		// The status is sent; all that is left is to cut the stream short
		// so the client sees a truncated body rather than a complete one.
		a.Log.ErrorContext(r.Context(), "stream file content", "file_id", f.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (a *API) deleteFile(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	id := r.PathValue("id")
	if err := a.Files.Delete(r.Context(), p.Tenant, id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

type uploadRequest struct {
	Filename     string            `json:"filename"`
	Purpose      string            `json:"purpose"`
	Bytes        int64             `json:"bytes"`
	MimeType     string            `json:"mime_type"`
	ExpiresAfter *expiresAfterJSON `json:"expires_after"`
}

func (a *API) createUpload(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req uploadRequest
	if err := decodeJSON(r, 64<<10, &req); err != nil {
		return err
	}
	exp, err := req.ExpiresAfter.seconds("expires_after")
	if err != nil {
		return err
	}
	u, err := a.Files.CreateUpload(r.Context(), p.Tenant, req.Filename, req.Purpose, req.MimeType, req.Bytes, exp)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (a *API) addPart(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	form, err := readForm(r, "data")
	if err != nil {
		return err
	}
	part, err := a.Files.AddPart(r.Context(), p.Tenant, r.PathValue("id"), int64(len(form.data)), bytes.NewReader(form.data))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, part)
}

type completeRequest struct {
	PartIDs []string `json:"part_ids"`
	MD5     string   `json:"md5"`
}

func (a *API) completeUpload(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req completeRequest
	if err := decodeJSON(r, 1<<20, &req); err != nil {
		return err
	}
	u, err := a.Files.Complete(r.Context(), p.Tenant, r.PathValue("id"), req.PartIDs, req.MD5)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (a *API) cancelUpload(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	u, err := a.Files.CancelUpload(r.Context(), p.Tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}
