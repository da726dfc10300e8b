package native

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/tidwall/gjson"
)

// upstream is one provider's batch API, on one model's base URL and key.
type upstream interface {
	// create uploads the rows that write writes (through its emit) and
	// creates the provider batch of group tag; it returns its id.
	create(ctx context.Context, tag, endpoint string, write func(emit func(customID string, body []byte) error) error) (string, error)
	// find lists the provider batches of group tag, of rows rows, created
	// since since: orphans, when the group records another.
	find(ctx context.Context, tag string, rows int, since time.Time) ([]string, error)
	// get reads a provider batch.
	get(ctx context.Context, id string) (remote, error)
	// results streams an ended provider batch's results to fn, by custom
	// id, one at a time; an error of fn stops them.
	results(ctx context.Context, r remote, fn func(customID string, res rowResult) error) error
	cancel(ctx context.Context, id string) error
}

// remote is a provider batch as polled.
type remote struct {
	id               string
	ended            bool
	outFile, errFile string // OpenAI's result files
}

// rowResult is what a provider batch did with a row: an answer for good,
// or rescue (expired, cancelled, a transient failure, no line at all):
// the row runs directly.
type rowResult struct {
	res    inference.Result
	rescue bool
}

// client is the HTTP side of both upstreams.
type client struct {
	http  *http.Client
	base  string
	model config.Model
	auth  func(h http.Header)
	// limit is the answer cap (Service.MaxResponseBytes): a result whose
	// body is longer is the row's response_too_large, as a direct call's.
	limit int64
}

// upstream is the provider batch API of model for batch b's groups: a
// message batch's betas and user profile go with each of its calls
// (docs/api.md "Anthropic Message Batches").
func (s *Service) upstream(ctx context.Context, b batch.Batch, model string) (upstream, error) {
	m, ok := s.Models.Lookup(model)
	if !ok {
		return nil, fmt.Errorf("model %q is not configured", model)
	}
	// A provider batch runs on one key: a pool's first (docs/design.md
	// "Rate budgets").
	key, err := s.Keys.Key(ctx, m.KeyEnvs()[0])
	if err != nil {
		return nil, fmt.Errorf("api key for model %q: %w", model, err)
	}
	hc := s.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	c := client{http: hc, base: strings.TrimSuffix(m.BaseURL, "/"), model: m,
		limit: cmp.Or(s.MaxResponseBytes, provider.DefaultMaxResponseBytes)}
	if m.Provider == config.Anthropic {
		extra := provider.Anthropic{Betas: b.AnthropicBetas, UserProfile: b.UserProfileID}
		c.auth = func(h http.Header) {
			h.Set("anthropic-version", "2023-06-01")
			h.Set("x-api-key", key)
			extra.SetHeaders(h)
		}
		return anthropicBatches{c}, nil
	}
	c.auth = func(h http.Header) { h.Set("Authorization", "Bearer "+key) }
	return openAIBatches{c}, nil
}

// statusError is a provider's non-2xx answer.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("provider answered %d: %s", e.status, e.body)
}

// open makes a request and returns the body of a 2xx answer.
func (c client) open(ctx context.Context, method, url, ctype string, body io.Reader) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	c.auth(req.Header)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %w", method, url, &statusError{resp.StatusCode, string(b)})
	}
	return resp.Body, nil
}

// call makes a JSON request and decodes its answer into out.
func (c client) call(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	rc, err := c.open(ctx, method, url, ctype, body)
	if err != nil {
		return err
	}
	defer rc.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(rc).Decode(out)
}

// streamed posts what write writes as it writes it, never holding the
// whole body, and decodes the answer into out.
func (c client) streamed(ctx context.Context, url, ctype string, write func(w io.Writer) error, out any) error {
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 256<<10)
		err := write(bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close() // a request that fails early stops the writer
	rc, err := c.open(ctx, http.MethodPost, url, ctype, pr)
	if err != nil {
		return err
	}
	defer rc.Close()
	return json.NewDecoder(rc).Decode(out)
}

// lineSlack is what a result line carries besides its answer's body: its
// ids, status and framing.
const lineSlack = 64 << 10

// headKept is what is kept of a line too long to read whole: its custom id
// comes first in both providers' result lines.
const headKept = 4 << 10

// eachLine calls fn with every line of the body at url, one at a time,
// reading at most the answer cap and lineSlack of a line: a longer one
// comes to fn cut to its first headKept bytes, with cut set. An import
// holds one line, whatever the file's size (docs/design.md "Memory").
func (c client) eachLine(ctx context.Context, url string, fn func(line []byte, cut bool) error) error {
	rc, err := c.open(ctx, http.MethodGet, url, "", nil)
	if err != nil {
		return err
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	var buf []byte
	for {
		line, cut, err := readLine(br, buf[:0], int(c.limit)+lineSlack)
		buf = line
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := fn(line, cut); ferr != nil {
				return ferr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("read %s: %w", url, err)
		}
	}
}

// readLine reads br's next line into buf: whole when at most limit bytes,
// else its first headKept bytes, cut, the rest skipped.
func readLine(br *bufio.Reader, buf []byte, limit int) (line []byte, cut bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		switch {
		case cut:
		case len(buf)+len(frag) > limit:
			cut = true
			buf = append(buf, frag[:max(0, min(len(frag), headKept-len(buf)))]...)
		default:
			buf = append(buf, frag...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, cut, err
		}
	}
}

// capped is rr, or the row's response_too_large when its answer's body is
// longer than the cap: the row fails as a direct call's answer over the
// cap does, never run again (docs/design.md "Memory").
func (c client) capped(rr rowResult, providerBatch, customID string) rowResult {
	if rr.rescue || int64(len(rr.res.Body)) <= c.limit {
		return rr
	}
	return c.tooLarge(providerBatch, customID)
}

// cutRow is the row of a result line cut for its length (head: what was
// kept of it): its custom id and its response_too_large. A head without
// an id names no row, which then runs directly.
func (c client) cutRow(head []byte, providerBatch string) (string, rowResult) {
	id := gjson.GetBytes(head, "custom_id").String()
	return id, c.tooLarge(providerBatch, id)
}

func (c client) tooLarge(providerBatch, customID string) rowResult {
	return rowResult{res: inference.Result{Model: c.model.Name, Attempts: 1, RequestID: "req_" + providerBatch + "_" + customID,
		ErrCode:    inference.CodeResponseTooLarge,
		ErrMessage: fmt.Sprintf("model %q: upstream answer over the size cap: more than %d bytes in provider batch %s", c.model.Name, c.limit, providerBatch)}}
}

// customID is row's custom id in group tag's provider batch: its number
// in the batch's input, which maps its result back to its chunk.
func customID(tag string, row int) string { return fmt.Sprintf("%s-r%d", tag, row) }

// rowOf is the row a custom id names, -1 for one of another group.
func rowOf(tag, id string) int {
	rest, ok := strings.CutPrefix(id, tag+"-r")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return -1
	}
	return n
}
