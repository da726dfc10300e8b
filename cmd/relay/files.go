package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// maxRequestData is the most file data one API request may carry (docs/api.md "Files"):
// smaller files go in one multipart request, bigger ones in pieces.
const maxRequestData = 4 << 20

// apiFile is the part of the API's File object the CLI reads.
type apiFile struct {
	ID            string `json:"id"`
	Bytes         int64  `json:"bytes"`
	CreatedAt     int64  `json:"created_at"`
	Filename      string `json:"filename"`
	Purpose       string `json:"purpose"`
	Status        string `json:"status"`
	StatusDetails string `json:"status_details"`
	UploadURL     string `json:"upload_url"`
}

// filesCommands are the commands of relay files.
var filesCommands = []string{"upload", "list", "get", "delete", "content"}

func runFiles(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return newCLI(stdout, stderr).files(ctx, args)
}

func (c *cli) files(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageErr("files: want %s", oneOf(filesCommands))
	}
	sub := args[0]
	synopsis := map[string]string{
		"upload": "FILE... [--json]", "list": "[--json]", "get": "ID [--json]",
		"delete": "ID [--json]", "content": "ID [-o FILE]",
	}[sub]
	if synopsis == "" {
		return usageErr("files: unknown command %q: want %s", sub, oneOf(filesCommands))
	}
	fs := newFlagSet("files "+sub, synopsis)
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	out := fs.String("o", "", "write the content to FILE instead of stdout")
	pos, err := c.parseArgs(fs, args[1:])
	if err != nil {
		return helpIsSuccess(err)
	}
	switch {
	case sub == "upload" && len(pos) == 0:
		return usageErr("files upload: give at least one FILE (.jsonl or .csv)")
	case sub == "list" && len(pos) != 0:
		return usageErr("files list takes no arguments")
	case sub != "upload" && sub != "list" && len(pos) != 1:
		return usageErr("files %s: give one file ID (relay files list shows them)", sub)
	case sub != "content" && *out != "":
		return usageErr("files %s: -o is for files content", sub)
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	switch sub {
	case "upload":
		for _, p := range pos {
			f, raw, err := cl.upload(ctx, p)
			if err != nil {
				return fmt.Errorf("upload %s: %w", p, err)
			}
			if *asJSON {
				printJSON(c.stdout, raw)
			} else {
				fmt.Fprintln(c.stdout, f.ID)
			}
		}
		return nil
	case "list":
		return c.listFiles(ctx, cl, *asJSON)
	case "get":
		var f apiFile
		raw, err := cl.call(ctx, http.MethodGet, "/files/"+url.PathEscape(pos[0]), nil, &f)
		if err != nil {
			return fmt.Errorf("get file %s: %w", pos[0], fileHint(err))
		}
		if *asJSON {
			return printJSON(c.stdout, raw)
		}
		return printFile(c.stdout, f)
	case "delete":
		raw, err := cl.call(ctx, http.MethodDelete, "/files/"+url.PathEscape(pos[0]), nil, nil)
		if err != nil {
			return fmt.Errorf("delete file %s: %w", pos[0], fileHint(err))
		}
		if *asJSON {
			return printJSON(c.stdout, raw)
		}
		fmt.Fprintln(c.stdout, "deleted", pos[0])
		return nil
	default: // content
		resp, err := cl.send(ctx, http.MethodGet, "/files/"+url.PathEscape(pos[0])+"/content", nil, "")
		if err != nil {
			return fmt.Errorf("get content of file %s: %w", pos[0], fileHint(err))
		}
		defer resp.Body.Close()
		return c.save(resp.Body, *out)
	}
}

func fileHint(err error) error {
	return withHint(err, http.StatusNotFound, "check the id: `relay files list` shows your files")
}

func (c *cli) listFiles(ctx context.Context, cl *apiClient, asJSON bool) error {
	var l struct {
		Data []apiFile `json:"data"`
	}
	raw, err := cl.call(ctx, http.MethodGet, "/files", nil, &l)
	if err != nil {
		return fmt.Errorf("list files: %w", err)
	}
	if asJSON {
		return printJSON(c.stdout, raw)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFILENAME\tBYTES\tSTATUS\tPURPOSE\tCREATED")
	for _, f := range l.Data {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", f.ID, f.Filename, f.Bytes, f.Status, f.Purpose, unixTime(f.CreatedAt))
	}
	return tw.Flush()
}

func printFile(w io.Writer, f apiFile) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", f.ID)
	fmt.Fprintf(tw, "filename\t%s\n", f.Filename)
	fmt.Fprintf(tw, "bytes\t%d\n", f.Bytes)
	fmt.Fprintf(tw, "purpose\t%s\n", f.Purpose)
	status := f.Status
	if f.StatusDetails != "" {
		status += ": " + f.StatusDetails
	}
	fmt.Fprintf(tw, "status\t%s\n", status)
	fmt.Fprintf(tw, "created\t%s\n", unixTime(f.CreatedAt))
	return tw.Flush()
}

// errNoPresign says the server does not offer presigned uploads.
var errNoPresign = errors.New("presigned uploads are not available")

// upload stores the local file at path as a batch input File, by the
// cheapest route its size allows, and returns the File and its JSON.
func (c *apiClient) upload(ctx context.Context, path string) (apiFile, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return apiFile{}, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return apiFile{}, nil, err
	}
	switch {
	case st.IsDir():
		return apiFile{}, nil, fmt.Errorf("%s is a directory", path)
	case st.Size() == 0:
		return apiFile{}, nil, fmt.Errorf("%s is empty: nothing to upload", path)
	case st.Size() <= maxRequestData:
		return c.uploadOne(ctx, filepath.Base(path), f)
	}
	file, raw, err := c.uploadPresigned(ctx, filepath.Base(path), f, st.Size())
	if errors.Is(err, errNoPresign) {
		return c.uploadParts(ctx, filepath.Base(path), f, st.Size())
	}
	return file, raw, err
}

// uploadOne sends a small file in one multipart request.
func (c *apiClient) uploadOne(ctx context.Context, name string, r io.Reader) (apiFile, []byte, error) {
	body, contentType, err := multipartBody(map[string]string{"purpose": "batch"}, "file", name, r)
	if err != nil {
		return apiFile{}, nil, err
	}
	resp, err := c.send(ctx, http.MethodPost, "/files", body, contentType)
	if err != nil {
		return apiFile{}, nil, err
	}
	defer resp.Body.Close()
	return decodeFile(resp.Body)
}

func decodeFile(r io.Reader) (apiFile, []byte, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return apiFile{}, nil, err
	}
	var f apiFile
	if err := json.Unmarshal(raw, &f); err != nil || f.ID == "" {
		return apiFile{}, nil, fmt.Errorf("the API answered with something other than a File: %s", truncate(string(raw), 200))
	}
	return f, raw, nil
}

func multipartBody(fields map[string]string, fileField, filename string, r io.Reader) (*bytes.Buffer, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			return nil, "", err
		}
	}
	part, err := mw.CreateFormFile(fileField, filename)
	if err != nil {
		return nil, "", err
	}
	if _, err := io.Copy(part, r); err != nil {
		return nil, "", err
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return &buf, mw.FormDataContentType(), nil
}

// uploadPresigned asks for a presigned URL (an extension, docs/api.md "Files"), PUTs
// the bytes straight to the object store and checks the File is processed.
// It returns errNoPresign when the server refuses the JSON create.
func (c *apiClient) uploadPresigned(ctx context.Context, name string, f *os.File, size int64) (apiFile, []byte, error) {
	var created apiFile
	_, err := c.call(ctx, http.MethodPost, "/files", map[string]any{"filename": name, "purpose": "batch", "bytes": size}, &created)
	var ae *apiError
	if errors.As(err, &ae) && presignUnsupported(ae.Status) {
		return apiFile{}, nil, fmt.Errorf("%w: %v", errNoPresign, err)
	}
	if err != nil {
		return apiFile{}, nil, err
	}
	if created.UploadURL == "" {
		return apiFile{}, nil, errNoPresign
	}

	// The URL carries its own signature: no key, and only the header it
	// signs, which makes the PUT create the object once and never replace it.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, created.UploadURL, io.NewSectionReader(f, 0, size))
	if err != nil {
		return apiFile{}, nil, fmt.Errorf("presigned upload URL of %s: %w", created.ID, err)
	}
	req.ContentLength = size
	req.Header.Set("If-None-Match", "*")
	resp, err := c.http.Do(req)
	if err != nil {
		return apiFile{}, nil, fmt.Errorf("PUT to the presigned upload URL of %s: %w", created.ID, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return apiFile{}, nil, fmt.Errorf("PUT to the presigned upload URL of %s: HTTP %d: %s\n  the URL is valid for 15 minutes: try again",
			created.ID, resp.StatusCode, truncate(strings.TrimSpace(string(msg)), 300))
	}
	return c.awaitProcessed(ctx, created.ID)
}

// presignUnsupported says a refused presign request means the server has
// no such extension (rather than a bad key or a server fault).
func presignUnsupported(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		return false
	}
	return status/100 == 4 || status == http.StatusNotImplemented
}

// awaitProcessed reads the File until the server has seen its object land.
func (c *apiClient) awaitProcessed(ctx context.Context, id string) (apiFile, []byte, error) {
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		var f apiFile
		raw, err := c.call(ctx, http.MethodGet, "/files/"+url.PathEscape(id), nil, &f)
		if err != nil {
			return apiFile{}, nil, fmt.Errorf("check file %s: %w", id, err)
		}
		switch f.Status {
		case "processed":
			return f, raw, nil
		case "error":
			return apiFile{}, nil, fmt.Errorf("file %s: the upload failed: %s", id, f.StatusDetails)
		}
		if wait > 3*time.Second {
			return apiFile{}, nil, fmt.Errorf("file %s is still %s after its bytes were PUT: check `relay files get %s` later", id, f.Status, id)
		}
		select {
		case <-ctx.Done():
			return apiFile{}, nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// uploadParts sends a big file through the Uploads API in parts of at most
// 4 MiB, cancelling the Upload if a step fails.
func (c *apiClient) uploadParts(ctx context.Context, name string, f *os.File, size int64) (apiFile, []byte, error) {
	var up struct {
		ID        string `json:"id"`
		PartLimit int64  `json:"part_size_limit"`
	}
	create := map[string]any{"filename": name, "purpose": "batch", "bytes": size, "mime_type": mimeType(name)}
	if _, err := c.call(ctx, http.MethodPost, "/uploads", create, &up); err != nil {
		return apiFile{}, nil, fmt.Errorf("create upload: %w", err)
	}
	file, raw, err := c.sendParts(ctx, up.ID, min(up.PartLimit, maxRequestData), name, f, size)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.call(cctx, http.MethodPost, "/uploads/"+url.PathEscape(up.ID)+"/cancel", nil, nil)
		return apiFile{}, nil, err
	}
	return file, raw, nil
}

func (c *apiClient) sendParts(ctx context.Context, uploadID string, partSize int64, name string, f *os.File, size int64) (apiFile, []byte, error) {
	if partSize <= 0 {
		partSize = maxRequestData
	}
	var partIDs []string
	for off := int64(0); off < size; off += partSize {
		n := min(partSize, size-off)
		body, contentType, err := multipartBody(nil, "data", name, io.NewSectionReader(f, off, n))
		if err != nil {
			return apiFile{}, nil, fmt.Errorf("read %s: %w", name, err)
		}
		resp, err := c.send(ctx, http.MethodPost, "/uploads/"+url.PathEscape(uploadID)+"/parts", body, contentType)
		if err != nil {
			return apiFile{}, nil, fmt.Errorf("upload part %d of %s: %w", len(partIDs)+1, uploadID, err)
		}
		var part struct {
			ID string `json:"id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&part)
		resp.Body.Close()
		if err != nil || part.ID == "" {
			return apiFile{}, nil, fmt.Errorf("upload part %d of %s: the answer has no part id", len(partIDs)+1, uploadID)
		}
		partIDs = append(partIDs, part.ID)
	}
	var done struct {
		Status string          `json:"status"`
		File   json.RawMessage `json:"file"`
	}
	if _, err := c.call(ctx, http.MethodPost, "/uploads/"+url.PathEscape(uploadID)+"/complete", map[string]any{"part_ids": partIDs}, &done); err != nil {
		return apiFile{}, nil, fmt.Errorf("complete upload %s: %w", uploadID, err)
	}
	file, raw, err := decodeFile(bytes.NewReader(done.File))
	if err != nil {
		return apiFile{}, nil, fmt.Errorf("complete upload %s (status %s): %w", uploadID, done.Status, err)
	}
	return file, raw, nil
}

func mimeType(name string) string {
	if strings.EqualFold(filepath.Ext(name), ".csv") {
		return "text/csv"
	}
	return "application/jsonl"
}
