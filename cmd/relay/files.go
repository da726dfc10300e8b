package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openai/openai-go/v3"
)

// maxRequestData is the most file data one API request may carry (docs/api.md "Files"):
// smaller files go in one multipart request, bigger ones in pieces.
const maxRequestData = 4 << 20

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
			f, err := cl.upload(ctx, p)
			if err != nil {
				return fmt.Errorf("upload %s: %w", p, err)
			}
			if *asJSON {
				printJSON(c.stdout, f.RawJSON())
			} else {
				fmt.Fprintln(c.stdout, f.ID)
			}
		}
		return nil
	case "list":
		return c.listFiles(ctx, cl, *asJSON)
	case "get":
		f, err := cl.oai.Files.Get(ctx, pos[0])
		if err != nil {
			return fmt.Errorf("get file %s: %w", pos[0], fileHint(err))
		}
		if *asJSON {
			return printJSON(c.stdout, f.RawJSON())
		}
		return printFile(c.stdout, *f)
	case "delete":
		d, err := cl.oai.Files.Delete(ctx, pos[0])
		if err != nil {
			return fmt.Errorf("delete file %s: %w", pos[0], fileHint(err))
		}
		if *asJSON {
			return printJSON(c.stdout, d.RawJSON())
		}
		fmt.Fprintln(c.stdout, "deleted", pos[0])
		return nil
	default: // content
		resp, err := cl.oai.Files.Content(ctx, pos[0])
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
	l, err := cl.oai.Files.List(ctx, openai.FileListParams{})
	if err != nil {
		return fmt.Errorf("list files: %w", err)
	}
	if asJSON {
		return printJSON(c.stdout, l.RawJSON())
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFILENAME\tBYTES\tSTATUS\tPURPOSE\tCREATED")
	for _, f := range l.Data {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", f.ID, f.Filename, f.Bytes, f.Status, f.Purpose, unixTime(f.CreatedAt))
	}
	return tw.Flush()
}

func printFile(w io.Writer, f openai.FileObject) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", f.ID)
	fmt.Fprintf(tw, "filename\t%s\n", f.Filename)
	fmt.Fprintf(tw, "bytes\t%d\n", f.Bytes)
	fmt.Fprintf(tw, "purpose\t%s\n", f.Purpose)
	status := string(f.Status)
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
// cheapest route its size allows.
func (c *apiClient) upload(ctx context.Context, path string) (*openai.FileObject, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	switch {
	case st.IsDir():
		return nil, fmt.Errorf("%s is a directory", path)
	case st.Size() == 0:
		return nil, fmt.Errorf("%s is empty: nothing to upload", path)
	case st.Size() <= maxRequestData:
		return checkFile(c.oai.Files.New(ctx, openai.FileNewParams{File: openai.File(f, name, mimeType(name)), Purpose: openai.FilePurposeBatch}))
	}
	file, err := c.uploadPresigned(ctx, name, f, st.Size())
	if errors.Is(err, errNoPresign) {
		return c.uploadParts(ctx, name, f, st.Size())
	}
	return file, err
}

// checkFile refuses an answer that is not a File.
func checkFile(f *openai.FileObject, err error) (*openai.FileObject, error) {
	if err == nil && f.ID == "" {
		err = fmt.Errorf("the API answered with something other than a File: %s", truncate(f.RawJSON(), 200))
	}
	return f, err
}

// uploadPresigned asks for a presigned URL (an extension, docs/api.md "Files"), PUTs
// the bytes straight to the object store and checks the File is processed.
// It returns errNoPresign when the server refuses the JSON create.
func (c *apiClient) uploadPresigned(ctx context.Context, name string, f *os.File, size int64) (*openai.FileObject, error) {
	var created openai.FileObject
	err := c.oai.Post(ctx, "files", map[string]any{"filename": name, "purpose": "batch", "bytes": size}, &created)
	var ae *apiError
	if errors.As(err, &ae) && presignUnsupported(ae.Status) {
		return nil, fmt.Errorf("%w: %v", errNoPresign, err)
	}
	if err != nil {
		return nil, err
	}
	var uploadURL string
	extra(created.JSON.ExtraFields, "upload_url", &uploadURL)
	if uploadURL == "" {
		return nil, errNoPresign
	}

	// The URL carries its own signature: no key, and only the header it
	// signs, which makes the PUT create the object once and never replace it.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, uploadURL, io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, fmt.Errorf("presigned upload URL of %s: %w", created.ID, err)
	}
	req.ContentLength = size
	req.Header.Set("If-None-Match", "*")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("PUT to the presigned upload URL of %s: %w", created.ID, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("PUT to the presigned upload URL of %s: HTTP %d: %s\n  the URL is valid for 15 minutes: try again",
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
func (c *apiClient) awaitProcessed(ctx context.Context, id string) (*openai.FileObject, error) {
	for wait := 100 * time.Millisecond; ; wait *= 2 {
		f, err := c.oai.Files.Get(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("check file %s: %w", id, err)
		}
		switch f.Status {
		case "processed":
			return f, nil
		case "error":
			return nil, fmt.Errorf("file %s: the upload failed: %s", id, f.StatusDetails)
		}
		if wait > 3*time.Second {
			return nil, fmt.Errorf("file %s is still %s after its bytes were PUT: check `relay files get %s` later", id, f.Status, id)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// uploadParts sends a big file through the Uploads API in parts of at most
// 4 MiB, cancelling the Upload if a step fails.
func (c *apiClient) uploadParts(ctx context.Context, name string, f *os.File, size int64) (*openai.FileObject, error) {
	up, err := c.oai.Uploads.New(ctx, openai.UploadNewParams{Filename: name, Purpose: openai.FilePurposeBatch, Bytes: size, MimeType: mimeType(name)})
	if err != nil {
		return nil, fmt.Errorf("create upload: %w", err)
	}
	var partLimit int64 // part_size_limit, an extension (docs/api.md "Files")
	extra(up.JSON.ExtraFields, "part_size_limit", &partLimit)
	file, err := c.sendParts(ctx, up.ID, min(partLimit, maxRequestData), name, f, size)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = c.oai.Uploads.Cancel(cctx, up.ID)
		return nil, err
	}
	return file, nil
}

func (c *apiClient) sendParts(ctx context.Context, uploadID string, partSize int64, name string, f *os.File, size int64) (*openai.FileObject, error) {
	if partSize <= 0 {
		partSize = maxRequestData
	}
	var partIDs []string
	for off := int64(0); off < size; off += partSize {
		n := min(partSize, size-off)
		part, err := c.oai.Uploads.Parts.New(ctx, uploadID, openai.UploadPartNewParams{Data: openai.File(io.NewSectionReader(f, off, n), name, "application/octet-stream")})
		if err != nil {
			return nil, fmt.Errorf("upload part %d of %s: %w", len(partIDs)+1, uploadID, err)
		}
		if part.ID == "" {
			return nil, fmt.Errorf("upload part %d of %s: the answer has no part id", len(partIDs)+1, uploadID)
		}
		partIDs = append(partIDs, part.ID)
	}
	done, err := c.oai.Uploads.Complete(ctx, uploadID, openai.UploadCompleteParams{PartIDs: partIDs})
	if err != nil {
		return nil, fmt.Errorf("complete upload %s: %w", uploadID, err)
	}
	file, err := checkFile(&done.File, nil)
	if err != nil {
		return nil, fmt.Errorf("complete upload %s (status %s): %w", uploadID, done.Status, err)
	}
	return file, nil
}

func mimeType(name string) string {
	if strings.EqualFold(filepath.Ext(name), ".csv") {
		return "text/csv"
	}
	return "application/jsonl"
}
