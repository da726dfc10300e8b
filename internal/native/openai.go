package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
)

// openAIBatches is OpenAI's Files + Batch API. The batch object and its
// result lines have the shapes this service serves (batch.Batch,
// part.Line: docs/api.md "Batches", "Output and error files").
type openAIBatches struct{ client }

// metaGroup is the metadata key naming a provider batch's group.
const metaGroup = "relay_group"

func (o openAIBatches) create(ctx context.Context, tag, endpoint string, write func(emit func(string, []byte) error) error) (string, error) {
	var file struct {
		ID string `json:"id"`
	}
	rows := 0
	boundary := multipart.NewWriter(io.Discard).Boundary()
	ctype := "multipart/form-data; boundary=" + boundary
	err := o.streamed(ctx, o.base+"/files", ctype, func(w io.Writer) error {
		mw := multipart.NewWriter(w)
		if err := mw.SetBoundary(boundary); err != nil {
			return err
		}
		if err := mw.WriteField("purpose", "batch"); err != nil {
			return err
		}
		fw, err := mw.CreateFormFile("file", tag+".jsonl")
		if err != nil {
			return err
		}
		enc := json.NewEncoder(fw)
		if err := write(func(id string, body []byte) error {
			rows++
			return enc.Encode(struct {
				CustomID string          `json:"custom_id"`
				Method   string          `json:"method"`
				URL      string          `json:"url"`
				Body     json.RawMessage `json:"body"`
			}{id, http.MethodPost, endpoint, body})
		}); err != nil {
			return err
		}
		return mw.Close()
	}, &file)
	if err != nil {
		return "", fmt.Errorf("upload rows: %w", err)
	}
	if rows == 0 {
		return "", errors.New("no rows to send: OpenAI refuses an empty batch")
	}
	var b batch.Batch
	err = o.call(ctx, http.MethodPost, o.base+"/batches", map[string]any{
		"input_file_id": file.ID, "endpoint": endpoint, "completion_window": "24h",
		"metadata": map[string]string{metaGroup: tag},
	}, &b)
	if err != nil {
		return "", fmt.Errorf("create batch: %w", err)
	}
	return b.ID, nil
}

func (o openAIBatches) find(ctx context.Context, tag string, _ int, since time.Time) ([]string, error) {
	var ids []string
	after := ""
	for {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Data    []batch.Batch `json:"data"`
			HasMore bool          `json:"has_more"`
		}
		if err := o.call(ctx, http.MethodGet, o.base+"/batches?"+q.Encode(), nil, &page); err != nil {
			return nil, fmt.Errorf("list batches: %w", err)
		}
		for _, b := range page.Data {
			if b.CreatedAt < since.Unix() {
				return ids, nil // newest first: the rest are older
			}
			if b.Metadata[metaGroup] == tag {
				ids = append(ids, b.ID)
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return ids, nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

func (o openAIBatches) get(ctx context.Context, id string) (remote, error) {
	var b batch.Batch
	if err := o.call(ctx, http.MethodGet, o.base+"/batches/"+id, nil, &b); err != nil {
		return remote{}, err
	}
	r := remote{id: id, ended: b.Status.Terminal()}
	if b.OutputFileID != nil {
		r.outFile = *b.OutputFileID
	}
	if b.ErrorFileID != nil {
		r.errFile = *b.ErrorFileID
	}
	return r, nil
}

func (o openAIBatches) results(ctx context.Context, r remote, fn func(string, rowResult) error) error {
	for _, f := range []string{r.outFile, r.errFile} {
		if f == "" {
			continue
		}
		err := o.eachLine(ctx, o.base+"/files/"+f+"/content", func(line []byte, cut bool) error {
			if cut {
				return fn(o.cutRow(line, r.id))
			}
			var l part.Line
			if err := json.Unmarshal(line, &l); err != nil {
				return fmt.Errorf("result line of %s: %w", r.id, err)
			}
			return fn(l.CustomID, o.capped(o.rowResult(l), r.id, l.CustomID))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// rowResult is a result line's row: its answer, unless it has none
// (expired, cancelled) or a transient one, which run directly.
func (o openAIBatches) rowResult(l part.Line) rowResult {
	if l.Response == nil || provider.Transient(l.Response.StatusCode, nil) {
		return rowResult{rescue: true}
	}
	return rowResult{res: inference.Result{StatusCode: l.Response.StatusCode, Body: l.Response.Body, RequestID: l.Response.RequestID,
		Model: o.model.Name, Attempts: 1}}
}

func (o openAIBatches) cancel(ctx context.Context, id string) error {
	err := o.call(ctx, http.MethodPost, o.base+"/batches/"+id+"/cancel", nil, nil)
	if err != nil {
		return fmt.Errorf("cancel batch %s: %w", id, err)
	}
	return nil
}
