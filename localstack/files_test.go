package localstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/files"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/openai/openai-go/v3"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/resources"
)

func chatLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello %d"}]}}`+"\n", i, i)
	}
	return b.Bytes()
}

func upload(t testing.TB, c openai.Client, name string, data []byte) *openai.FileObject {
	t.Helper()
	f, err := c.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(bytes.NewReader(data), name, "application/jsonl"), Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatalf("upload %s: %v", name, err)
	}
	return f
}

func content(t testing.TB, c openai.Client, id string) []byte {
	t.Helper()
	resp, err := c.Files.Content(context.Background(), id)
	if err != nil {
		t.Fatalf("content %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func apiStatus(t testing.TB, err error) int {
	t.Helper()
	status, _ := apiErr(t, err)
	return status
}

// apiErr returns an API error's status and its raw body.
func apiErr(t testing.TB, err error) (int, string) {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v, want an API error", err)
	}
	return e.StatusCode, e.RawJSON()
}

func TestFilesLifecycle(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()

	data := chatLines(50)
	f := upload(t, c, "input.jsonl", data)
	if f.Bytes != int64(len(data)) || f.Filename != "input.jsonl" || f.Purpose != "batch" || f.Status != "processed" || !strings.HasPrefix(f.ID, "file-") {
		t.Fatalf("uploaded file: got %+v", f)
	}
	got, err := c.Files.Get(ctx, f.ID)
	if err != nil || got.ID != f.ID || got.Bytes != f.Bytes {
		t.Fatalf("get: got %+v, %v", got, err)
	}
	if b := content(t, c, f.ID); !bytes.Equal(b, data) {
		t.Fatalf("content: got %d bytes, want the %d uploaded", len(b), len(data))
	}

	// Pagination, newest first.
	var ids []string
	for range 3 {
		ids = append(ids, upload(t, c, "more.csv", []byte("prompt\nhi\n")).ID)
	}
	page, err := c.Files.List(ctx, openai.FileListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != ids[2] || page.Data[1].ID != ids[1] || !page.HasMore {
		t.Fatalf("first page: got %d files has_more=%v, want the 2 newest and more", len(page.Data), page.HasMore)
	}
	var all []string
	iter := c.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(2)})
	for iter.Next() {
		all = append(all, iter.Current().ID)
	}
	if iter.Err() != nil || len(all) != 4 || all[3] != f.ID {
		t.Fatalf("auto paging: got %v, %v; want 4 files ending with %s", all, iter.Err(), f.ID)
	}

	del, err := c.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted || del.ID != f.ID {
		t.Fatalf("delete: got %+v, %v", del, err)
	}
	if _, err := c.Files.Get(ctx, f.ID); apiStatus(t, err) != http.StatusNotFound {
		t.Fatalf("get after delete: got %v, want 404", err)
	}
}

func TestUploadsAPI(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	ctx := context.Background()

	// 24 MiB in parts of 4 MiB: more than one request can carry.
	data := bytes.Repeat(chatLines(1000), 1)
	for len(data) < 24<<20 {
		data = append(data, data...)
	}
	data = data[:24<<20]
	// Cut on a line boundary so it stays a valid JSONL file.
	data = data[:bytes.LastIndexByte(data, '\n')+1]

	u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: int64(len(data)), Filename: "big.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	if u.Status != "pending" {
		t.Fatalf("upload: got status %q", u.Status)
	}
	var parts []string
	for off := 0; off < len(data); off += 4 << 20 {
		end := min(off+4<<20, len(data))
		p, err := c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: bytes.NewReader(data[off:end])})
		if err != nil {
			t.Fatalf("part at %d: %v", off, err)
		}
		parts = append(parts, p.ID)
	}
	done, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: parts})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != "completed" || done.File.ID == "" || done.File.Bytes != int64(len(data)) {
		t.Fatalf("complete: got %+v", done)
	}
	got := content(t, c, done.File.ID)
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("content of the uploaded file differs: got %d bytes, want %d", len(got), len(data))
	}

	// A part over 4 MiB is refused with a message that says what to do.
	u2, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: 5 << 20, Filename: "x.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Uploads.Parts.New(ctx, u2.ID, openai.UploadPartNewParams{Data: bytes.NewReader(make([]byte, 4<<20+1))})
	if status, body := apiErr(t, err); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "4 MiB") {
		t.Fatalf("oversized part: got %v, want 413 naming the 4 MiB limit", err)
	}
	// Parts that do not add up, then cancel.
	p, err := c.Uploads.Parts.New(ctx, u2.ID, openai.UploadPartNewParams{Data: strings.NewReader("short")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Uploads.Complete(ctx, u2.ID, openai.UploadCompleteParams{PartIDs: []string{p.ID}}); apiStatus(t, err) != http.StatusBadRequest {
		t.Fatalf("complete with wrong size: got %v, want 400", err)
	}
	cu, err := c.Uploads.Cancel(ctx, u2.ID)
	if err != nil || cu.Status != "cancelled" {
		t.Fatalf("cancel: got %+v, %v", cu, err)
	}
	if _, err := c.Uploads.Parts.New(ctx, u2.ID, openai.UploadPartNewParams{Data: strings.NewReader("x")}); apiStatus(t, err) != http.StatusBadRequest {
		t.Fatalf("part after cancel: got %v, want 400", err)
	}
}

func TestFilesBadInputs(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	other, _ := client(t, rt, "globex")
	ctx := context.Background()
	f := upload(t, c, "in.jsonl", chatLines(2))

	raw := func(method, path, ctype, authz string, body io.Reader) (int, string) {
		req, _ := http.NewRequest(method, rt.URL+path, body)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if authz != "" {
			req.Header.Set("Authorization", "Bearer "+authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	tests := []struct {
		name       string
		do         func() (int, string)
		wantStatus int
		wantIn     string
	}{
		{"malformed multipart", func() (int, string) {
			return raw("POST", "/v1/files", "multipart/form-data; boundary=xyz", key, strings.NewReader("--xyz\r\nnot a part"))
		}, 400, "multipart"},
		{"no boundary", func() (int, string) {
			return raw("POST", "/v1/files", "multipart/form-data", key, strings.NewReader("x"))
		}, 400, "boundary"},
		{"wrong purpose", func() (int, string) {
			_, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("x"), "a.jsonl", "application/jsonl"), Purpose: openai.FilePurposeFineTune})
			return apiErr(t, err)
		}, 400, "purpose"},
		{"wrong extension", func() (int, string) {
			_, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader("x"), "a.exe", "application/octet-stream"), Purpose: openai.FilePurposeBatch})
			return apiErr(t, err)
		}, 400, ".jsonl or .csv"},
		{"oversized file", func() (int, string) {
			_, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(make([]byte, 5<<20)), "a.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
			return apiErr(t, err)
		}, 413, "Uploads API"},
		{"unknown id", func() (int, string) {
			_, err := c.Files.Get(ctx, "file-0000000000000000000000000")
			return apiErr(t, err)
		}, 404, "no such file"},
		{"malformed id", func() (int, string) { return raw("GET", "/v1/files/..%2f..%2fetc", "", key, nil) }, 404, ""},
		{"no key", func() (int, string) { return raw("GET", "/v1/files", "", "", nil) }, 401, "API key"},
		{"bad key", func() (int, string) {
			bad := clientWithKey(rt, "rb-nope")
			_, err := bad.Files.List(ctx, openai.FileListParams{})
			return apiErr(t, err)
		}, 401, "incorrect API key"},
		{"another tenant's file", func() (int, string) {
			_, err := other.Files.Get(ctx, f.ID)
			return apiErr(t, err)
		}, 404, "no such file"},
		{"another tenant's content", func() (int, string) {
			_, err := other.Files.Content(ctx, f.ID)
			return apiErr(t, err)
		}, 404, ""},
		{"another tenant's delete", func() (int, string) {
			_, err := other.Files.Delete(ctx, f.ID)
			return apiErr(t, err)
		}, 404, ""},
		{"bad limit", func() (int, string) { return raw("GET", "/v1/files?limit=0", "", key, nil) }, 400, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := tt.do()
			if status != tt.wantStatus || !strings.Contains(body, tt.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, tt.wantStatus, tt.wantIn)
			}
		})
	}

	// Another tenant never sees the file in a list.
	page, err := other.Files.List(ctx, openai.FileListParams{})
	if err != nil || len(page.Data) != 0 {
		t.Fatalf("other tenant's list: got %d files, %v; want none", len(page.Data), err)
	}
	// The file is intact after all that.
	if _, err := c.Files.Get(ctx, f.ID); err != nil {
		t.Fatalf("owner's get: %v", err)
	}
}

func TestKeysScopesAndDisable(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	batchesOnly, err := rt.Key(ctx, "acme", auth.ScopeBatches)
	if err != nil {
		t.Fatal(err)
	}
	limited := clientWithKey(rt, batchesOnly)
	_, err = limited.Files.List(ctx, openai.FileListParams{})
	if apiStatus(t, err) != http.StatusForbidden {
		t.Fatalf("files with a batches-only key: got %v, want 403", err)
	}
	c, key := client(t, rt, "acme")
	if _, err := c.Files.List(ctx, openai.FileListParams{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.App.Store.DisableKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files.List(ctx, openai.FileListParams{}); apiStatus(t, err) != http.StatusUnauthorized {
		t.Fatalf("disabled key: got %v, want 401", err)
	}
}

// A presigned upload URL writes its object once: a second PUT with it (a
// URL left in a browser's history or a proxy's log), after the file was
// processed and a batch planned on it, is refused, and the batch runs the
// rows that were uploaded. The URL signs If-None-Match: * (the emulator does
// not check signatures: TestPresignPutIsOneShortLivedObject checks that a
// PUT without the header cannot match the URL's).
func TestPresignedUploadCannotBeReplaced(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	rows := nRows(3, "orig")
	evil := nRows(3, "evil")
	for i := range evil {
		evil[i].id = fmt.Sprintf("x%04d", i)
	}
	data, replay := jsonlRows(rows), jsonlRows(evil)
	if len(data) != len(replay) {
		t.Fatalf("the replay has %d bytes, want %d as the URL signs", len(replay), len(data))
	}
	status, body := rawDo(t, rt, key, "POST", "/v1/files", strings.NewReader(fmt.Sprintf(`{"filename":"in.jsonl","purpose":"batch","bytes":%d}`, len(data))))
	var f struct {
		ID        string `json:"id"`
		UploadURL string `json:"upload_url"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || f.UploadURL == "" {
		t.Fatalf("presign: %d %s", status, body)
	}
	put := func(b []byte) int {
		t.Helper()
		req, _ := http.NewRequest("PUT", f.UploadURL, bytes.NewReader(b))
		req.Header.Set("If-None-Match", "*")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := put(data); s != 200 {
		t.Fatalf("upload: %d", s)
	}
	b := createBatch(t, c, f.ID)
	if s := put(replay); s != http.StatusPreconditionFailed {
		t.Fatalf("a second PUT with the URL: %d, want 412", s)
	}
	if got := rawGet(t, rt, key, "/v1/files/"+f.ID+"/content"); !bytes.Equal(got, data) {
		t.Fatalf("the file's content changed after a second PUT:\n%s", got)
	}
	checkInvariant(t, c, waitBatch(t, c, b.ID), idsOf(rows))
}

// TestPresignedUploadPinned: the ETag of a presigned upload's object is
// recorded when the upload is first seen landed, and every read of it as
// a batch's input asks for that object (If-Match). An object replaced
// behind the URL's back (here by the bucket's owner, since the URL's
// If-None-Match refuses a second PUT) fails the batch planned on it with
// input_file_changed, and the executor's ranged reads get blob.ErrChanged.
func TestPresignedUploadPinned(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	data := jsonlRows(nRows(3, "orig"))
	status, body := rawDo(t, rt, key, "POST", "/v1/files", strings.NewReader(fmt.Sprintf(`{"filename":"in.jsonl","purpose":"batch","bytes":%d}`, len(data))))
	var f struct {
		ID        string `json:"id"`
		UploadURL string `json:"upload_url"`
	}
	if status != 200 || json.Unmarshal(body, &f) != nil || f.UploadURL == "" {
		t.Fatalf("presign: %d %s", status, body)
	}
	req, _ := http.NewRequest("PUT", f.UploadURL, bytes.NewReader(data))
	req.Header.Set("If-None-Match", "*")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	if got, err := c.Files.Get(ctx, f.ID); err != nil || got.Status != "processed" {
		t.Fatalf("file after the upload: %+v %v", got, err)
	}
	rec, err := rt.App.Store.GetFile(ctx, "acme", f.ID)
	if err != nil || rec.ETag == "" {
		t.Fatalf("file record %+v: no ETag pinned (%v)", rec, err)
	}
	objKey := rec.Objects[0]
	evil := jsonlRows(nRows(3, "evil"))
	if err := rt.App.Blobs.Put(ctx, objKey, bytes.NewReader(evil), int64(len(evil))); err != nil {
		t.Fatal(err)
	}

	if _, err := rt.App.Blobs.ReadRange(ctx, []batch.Object{{Key: objKey, Size: int64(len(evil)), ETag: rec.ETag}}, 0, 10); !errors.Is(err, blob.ErrChanged) {
		t.Fatalf("a read pinned to the uploaded object: %v, want blob.ErrChanged", err)
	}
	if _, err := rt.App.Blobs.ReadRange(ctx, []batch.Object{{Key: objKey, Size: int64(len(evil))}}, 0, 10); err != nil {
		t.Fatalf("an unpinned read: %v", err)
	}
	b := waitBatch(t, c, createBatch(t, c, f.ID).ID)
	if b.Status != openai.BatchStatusFailed || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != batch.CodeInputChanged {
		t.Fatalf("batch on the replaced object: %s %+v, want failed with input_file_changed", b.Status, b.Errors.Data)
	}
	if b.RequestCounts.Completed != 0 || rt.Mock.Stats().Requests != 0 {
		t.Fatalf("rows ran: %+v, %d upstream calls", b.RequestCounts, rt.Mock.Stats().Requests)
	}
}

// TestExpiryTagsTheBytes: every object of an expiring file carries the
// expiry class whose lifecycle rule (resources.BucketExpiry, asserted on the
// template by TestBucket in infra) deletes it at least files.InputKept
// after the file expires and within a day more; an Upload's parts carry
// the one-day class until the Upload completes (an abandoned upload's are
// deleted), then their file's; a scheduled template's input carries none
// (it is kept) and gets one back when the template is cancelled; chunk
// parts of a batch with output_expires_after carry a class that outlives
// its output file. The emulator runs no lifecycle, hence the tags.
// expiryTag returns object key's expiry class tag ("" for none).
func expiryTag(ctx context.Context, s *blob.Store, key string) (string, error) {
	out, err := s.S3.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return "", fmt.Errorf("tags of %s: %w", key, err)
	}
	for _, t := range out.TagSet {
		if aws.ToString(t.Key) == resources.ExpiryTag {
			return aws.ToString(t.Value), nil
		}
	}
	return "", nil
}

func TestExpiryTagsTheBytes(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	tagsOf := func(fileID string) []string {
		t.Helper()
		f, err := rt.App.Store.GetFile(ctx, "acme", fileID)
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, k := range f.Objects {
			tag, err := expiryTag(ctx, rt.App.Blobs, k)
			if err != nil {
				t.Fatal(err)
			}
			tags = append(tags, tag)
		}
		return tags
	}
	want := func(what string, got []string, tag string) {
		t.Helper()
		if len(got) == 0 || slices.ContainsFunc(got, func(g string) bool { return g != tag }) {
			t.Errorf("%s: expiry tags %q, want %q", what, got, tag)
		}
	}
	data := jsonlRows(nRows(2, "x"))

	short, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(data), "short.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch, ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600}})
	if err != nil {
		t.Fatal(err)
	}
	want("a file expiring after an hour", tagsOf(short.ID), "2d") // 1 h + files.InputKept
	long := upload(t, c, "long.jsonl", data)
	want("a file expiring after 30 days", tagsOf(long.ID), "32d")

	u, err := c.Uploads.New(ctx, openai.UploadNewParams{Bytes: int64(len(data)), Filename: "up.jsonl", MimeType: "application/jsonl", Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Uploads.Parts.New(ctx, u.ID, openai.UploadPartNewParams{Data: bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	partKey := fmt.Sprintf("uploads/acme/%s/%s", u.ID, p.ID)
	if tag, err := expiryTag(ctx, rt.App.Blobs, partKey); err != nil || tag != files.PendingPartTag {
		t.Errorf("a pending upload's part: tag %q (%v), want %q", tag, err, files.PendingPartTag)
	}
	done, err := c.Uploads.Complete(ctx, u.ID, openai.UploadCompleteParams{PartIDs: []string{p.ID}})
	if err != nil {
		t.Fatal(err)
	}
	want("a completed upload's parts", tagsOf(done.File.ID), "32d")

	status, body := postBatch(t, rt, key, map[string]any{"input_file_id": long.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h", "schedule": "0 3 * * *"})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	want("a scheduled template's input", tagsOf(long.ID), "")
	if status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+decodeBatch(t, body).ID+"/cancel", nil); status != 200 {
		t.Fatalf("cancel template: %d %s", status, body)
	}
	want("a cancelled template's input", tagsOf(long.ID), "32d")

	b := waitBatch(t, c, createBatch(t, c, short.ID, option.WithJSONSet("output_expires_after", map[string]any{"anchor": "created_at", "seconds": 3600})).ID)
	chunks, err := rt.App.Store.Chunks(ctx, b.ID)
	if err != nil || len(chunks) == 0 {
		t.Fatalf("chunks: %v %v", chunks, err)
	}
	tag, err := expiryTag(ctx, rt.App.Blobs, chunks[0].Parts("out"))
	if err != nil || tag != "2d" { // 24 h window + 1 h grace + 1 h
		t.Errorf("a chunk part of a batch with output_expires_after: tag %q (%v), want 2d", tag, err)
	}
	out, err := rt.App.Store.GetFile(ctx, "acme", b.OutputFileID)
	if err != nil || out.ExpiresAt == nil || *out.ExpiresAt > b.CreatedAt+2*24*3600 {
		t.Errorf("output file expires at %v, after its parts may be gone (%d)", out.ExpiresAt, b.CreatedAt+2*24*3600)
	}
}

// TestInputDeletedWhileItsBatchRuns: an input file deleted one second after
// its batch's create, a common storage-saving habit, is answered as
// deleted and is gone for the API at once; the batch reads it on and
// completes with every row; its bytes go when the batch ends (docs/api.md
// "Files", deleting an input). Before, the batch failed with
// input_file_missing for the rows that had not run.
func TestInputDeletedWhileItsBatchRuns(t *testing.T) {
	t.Parallel()
	rt := shippedRuntime(t)
	ctx := context.Background()
	c, _ := client(t, rt, "acme")
	// 400 rows of 100 ms on 8 slots: about 5 s, in chunks of 192 rows.
	f := upload(t, c, "in.jsonl", jsonlRows(slowRows("d", "small-8", 400, 100*time.Millisecond)))
	rec, err := rt.App.Store.GetFile(ctx, "acme", f.ID)
	if err != nil || len(rec.Objects) == 0 {
		t.Fatalf("file record: %+v, %v", rec, err)
	}
	b := createBatch(t, c, f.ID)
	time.Sleep(time.Second)

	del, err := c.Files.Delete(ctx, f.ID)
	if err != nil || !del.Deleted || del.ID != f.ID {
		t.Fatalf("delete: got %+v, %v", del, err)
	}
	if _, err := c.Files.Get(ctx, f.ID); apiStatus(t, err) != http.StatusNotFound {
		t.Fatalf("get after delete: got %v, want 404", err)
	}
	if b2, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h}); apiStatus(t, err) != http.StatusBadRequest {
		t.Fatalf("a new batch of the deleted file: %+v, %v; want 400", b2, err)
	}
	done := waitBatch(t, c, b.ID)
	if done.Status != "completed" || done.RequestCounts.Completed != 400 || done.RequestCounts.Total != 400 {
		t.Fatalf("batch whose input was deleted while it ran: %s %+v, want completed with 400 rows", done.Status, done.RequestCounts)
	}
	ids := map[string]bool{}
	for line := range strings.Lines(string(content(t, c, done.OutputFileID))) {
		var l struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		ids[l.CustomID] = true
	}
	if len(ids) != 400 {
		t.Fatalf("%d distinct rows in the output, want 400", len(ids))
	}
	for _, key := range rec.Objects {
		if _, err := rt.App.Blobs.Size(ctx, key); err == nil {
			t.Errorf("object %s of the deleted file outlived its last batch", key)
		}
	}
	if _, err := rt.App.Store.GetFile(ctx, "acme", f.ID); err == nil {
		t.Error("the deleted file's record outlived its last batch")
	}
}

// TestManyBatchesOfOneFile: batches created at once from one input file
// each hold it (docs/api.md "Files", deleting an input) in one atomic
// write, so none of the creates fails on the file's record. Before, the
// holds were read-modify-writes of the record: with eight clients
// creating 300 batches of one file (make bench's waiting batches), creates
// ran out of retries and answered 500.
func TestManyBatchesOfOneFile(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(1, "x")))
	var wg sync.WaitGroup
	errs := make(chan error, 96)
	for range 8 {
		wg.Go(func() {
			for range 12 {
				_, err := c.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: f.ID,
					Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("create: %v", err)
	}
	rec, err := rt.App.Store.GetFile(context.Background(), "acme", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Readers) == 0 {
		t.Fatalf("the file's readers after 96 creates: %v", rec.Readers)
	}
}
