package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/tidwall/gjson"
)

// anthropicBatches is Anthropic's Message Batches API (its objects as
// provider.MessageBatch and provider.MessageResult read them).
type anthropicBatches struct{ client }

func (a anthropicBatches) create(ctx context.Context, tag, _ string, write func(emit func(string, []byte) error) error) (string, error) {
	var mb provider.MessageBatch
	err := a.streamed(ctx, a.base+"/v1/messages/batches", "application/json", func(w io.Writer) error {
		if _, err := io.WriteString(w, `{"requests":[`); err != nil {
			return err
		}
		n := 0
		if err := write(func(id string, body []byte) error {
			line, err := json.Marshal(struct {
				CustomID string          `json:"custom_id"`
				Params   json.RawMessage `json:"params"`
			}{id, body})
			if err != nil {
				return err
			}
			if n > 0 {
				line = append([]byte{','}, line...)
			}
			n++
			_, err = w.Write(line)
			return err
		}); err != nil {
			return err
		}
		_, err := io.WriteString(w, `]}`)
		return err
	}, &mb)
	if err != nil {
		return "", fmt.Errorf("create message batch: %w", err)
	}
	return mb.ID, nil
}

// find matches message batches, which carry no metadata, on a listing:
// created since since with the group's request count; one that has ended
// must also hold the group's custom ids. One still running cannot be
// looked into, so a same-sized batch created in the same moment is taken
// for the group's too: cancelling it costs its rows a direct run, never a
// result.
func (a anthropicBatches) find(ctx context.Context, tag string, rows int, since time.Time) ([]string, error) {
	var ids []string
	after := ""
	for {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after_id", after)
		}
		var page struct {
			Data    []provider.MessageBatch `json:"data"`
			HasMore bool                    `json:"has_more"`
			LastID  string                  `json:"last_id"`
		}
		if err := a.call(ctx, http.MethodGet, a.base+"/v1/messages/batches?"+q.Encode(), nil, &page); err != nil {
			return nil, fmt.Errorf("list message batches: %w", err)
		}
		for _, mb := range page.Data {
			if !mb.Created.IsZero() && mb.Created.Before(since) {
				return ids, nil // newest first: the rest are older
			}
			if mb.Requests != int64(rows) {
				continue
			}
			ours, err := a.holds(ctx, mb, tag)
			if err != nil {
				return nil, err
			}
			if ours {
				ids = append(ids, mb.ID)
			}
		}
		if !page.HasMore || page.LastID == "" {
			return ids, nil
		}
		after = page.LastID
	}
}

var errStopLines = errors.New("stop")

// holds reports whether message batch mb may be group tag's: its first
// result's custom id says so once it has ended.
func (a anthropicBatches) holds(ctx context.Context, mb provider.MessageBatch, tag string) (bool, error) {
	if !mb.Ended {
		return true, nil
	}
	ours := false
	err := a.eachLine(ctx, a.base+"/v1/messages/batches/"+mb.ID+"/results", func(line []byte, _ bool) error {
		ours = rowOf(tag, gjson.GetBytes(line, "custom_id").String()) >= 0
		return errStopLines
	})
	if err != nil && !errors.Is(err, errStopLines) {
		return false, err
	}
	return ours, nil
}

func (a anthropicBatches) get(ctx context.Context, id string) (remote, error) {
	var mb provider.MessageBatch
	if err := a.call(ctx, http.MethodGet, a.base+"/v1/messages/batches/"+id, nil, &mb); err != nil {
		return remote{}, err
	}
	return remote{id: id, ended: mb.Ended}, nil
}

// transientTypes are the error types of an errored request worth a direct
// run: Anthropic's own trouble, not the request's.
var transientTypes = map[string]bool{"api_error": true, "overloaded_error": true, "rate_limit_error": true, "timeout_error": true}

func (a anthropicBatches) results(ctx context.Context, r remote, fn func(string, rowResult) error) error {
	return a.eachLine(ctx, a.base+"/v1/messages/batches/"+r.id+"/results", func(line []byte, cut bool) error {
		if cut {
			return fn(a.cutRow(line, r.id))
		}
		var mr provider.MessageResult
		if err := json.Unmarshal(line, &mr); err != nil {
			return fmt.Errorf("result of %s: %w", r.id, err)
		}
		res := inference.Result{Model: a.model.Name, Attempts: 1, RequestID: "req_" + r.id + "_" + mr.CustomID}
		switch {
		case mr.Outcome == "succeeded":
			res.StatusCode, res.Body = http.StatusOK, mr.Message
		case mr.Outcome == "errored" && mr.Error != nil && !transientTypes[mr.ErrorType]:
			res.StatusCode, res.Body = provider.AnthropicStatus(mr.ErrorType), mr.Error
		default: // canceled, expired, a transient error
			return fn(mr.CustomID, rowResult{rescue: true})
		}
		return fn(mr.CustomID, a.capped(rowResult{res: res}, r.id, mr.CustomID))
	})
}

func (a anthropicBatches) cancel(ctx context.Context, id string) error {
	if err := a.call(ctx, http.MethodPost, a.base+"/v1/messages/batches/"+id+"/cancel", nil, nil); err != nil {
		return fmt.Errorf("cancel message batch %s: %w", id, err)
	}
	return nil
}
