//go:build loadtest || chaos

package localstack

// What the load test (load_test.go) and the chaos run (chaos_test.go)
// share: counters of API and AWS requests, latency samples, a tolerant
// poller for goroutines (no t.Fatal off the test goroutine), and the
// per-tenant accounting check.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// apiCounter counts the HTTP requests the clients send and their statuses.
type apiCounter struct {
	requests atomic.Int64
	mu       sync.Mutex
	byStatus map[int]int64
}

func newAPICounter() *apiCounter { return &apiCounter{byStatus: map[int]int64{}} }

func (a *apiCounter) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	a.requests.Add(1)
	resp, err := next(req)
	status := -1 // no answer
	if err == nil {
		status = resp.StatusCode
	}
	a.mu.Lock()
	a.byStatus[status]++
	a.mu.Unlock()
	return resp, err
}

func (a *apiCounter) statuses() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(a.byStatus)) {
		name := strconv.Itoa(s)
		if s == -1 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, a.byStatus[s]))
	}
	return strings.Join(parts, " ")
}

// sdkClient is an official OpenAI client for key on baseURL whose requests
// are counted; it does not retry, so every latency is one request's.
func sdkClient(baseURL, key string, api *apiCounter) openai.Client {
	return openai.NewClient(option.WithBaseURL(baseURL+"/v1/"), option.WithAPIKey(key),
		option.WithMaxRetries(0), option.WithRequestTimeout(30*time.Second), option.WithMiddleware(api.middleware))
}

// latencies collects durations per operation.
type latencies struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

func newLatencies() *latencies { return &latencies{by: map[string][]time.Duration{}} }

func (l *latencies) add(op string, d time.Duration) {
	l.mu.Lock()
	l.by[op] = append(l.by[op], d)
	l.mu.Unlock()
}

// timed runs fn and records how long it took under op.
func timed[T any](l *latencies, op string, fn func() (T, error)) (T, error) {
	start := time.Now()
	v, err := fn()
	l.add(op, time.Since(start))
	return v, err
}

// quantile is the q-quantile (nearest rank) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// table prints rows of cells with aligned columns.
func table(w io.Writer, rows [][]string) {
	widths := map[int]int{}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			pad := widths[i] - len([]rune(c))
			if i == 0 {
				b.WriteString("  " + c + strings.Repeat(" ", pad))
			} else {
				b.WriteString("  " + strings.Repeat(" ", pad) + c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// chatRow is one input row: a custom id and the prompt.
type chatRow struct{ id, content string }

func (r chatRow) request(model string) map[string]any {
	return map[string]any{"custom_id": r.id, "method": "POST", "url": "/v1/chat/completions",
		"body": map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": r.content}}}}
}

func chatJSONL(rows []chatRow, model string) []byte {
	var b bytes.Buffer
	for _, r := range rows {
		line, _ := json.Marshal(r.request(model))
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// submit creates a batch of rows, from an uploaded file or inline, with
// the official client; latencies are recorded as upload, create (file)
// and create (inline); opts go with the create.
func submit(ctx context.Context, c openai.Client, lat *latencies, rows []chatRow, model string, inline bool, opts ...option.RequestOption) (*openai.Batch, *openai.FileObject, error) {
	params := openai.BatchNewParams{Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h}
	if inline {
		reqs := make([]map[string]any, len(rows))
		for i, r := range rows {
			reqs[i] = r.request(model)
		}
		b, err := timed(lat, "create (inline)", func() (*openai.Batch, error) {
			return c.Batches.New(ctx, params, append(opts, option.WithJSONDel("input_file_id"), option.WithJSONSet("requests", reqs))...)
		})
		return b, nil, err
	}
	f, err := timed(lat, "upload file", func() (*openai.FileObject, error) {
		return c.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(chatJSONL(rows, model)), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("upload: %w", err)
	}
	params.InputFileID = f.ID
	b, err := timed(lat, "create (file)", func() (*openai.Batch, error) { return c.Batches.New(ctx, params, opts...) })
	return b, f, err
}

// pollTerminal gets the batch every `every` until it is terminal or ctx
// ends; failed gets (a runtime restarting, say) are counted and retried.
func pollTerminal(ctx context.Context, c openai.Client, lat *latencies, id string, every time.Duration, failures *atomic.Int64) (*openai.Batch, error) {
	for {
		b, err := timed(lat, "get batch", func() (*openai.Batch, error) { return c.Batches.Get(ctx, id) })
		switch {
		case err == nil && terminal[b.Status]:
			return b, nil
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("batch %s: %w", id, ctx.Err())
		case err != nil:
			failures.Add(1)
		}
		select {
		case <-ctx.Done():
			status := "unknown"
			if b != nil {
				status = string(b.Status)
			}
			return nil, fmt.Errorf("batch %s still %s: %w", id, status, ctx.Err())
		case <-time.After(every):
		}
	}
}

// tenantRun is what one tenant submitted and got back.
type tenantRun struct {
	name, key string
	client    openai.Client
	batches   []*openai.Batch
	inputs    []string   // input file ids, "" for inline batches
	ids       [][]string // each batch's custom ids
	// workflows: the tenant's batches run workflow records, whose steps
	// make more upstream requests than the records have lines, so its
	// usage is checked on tokens only.
	workflows bool
}

// newTenants makes n tenants named prefix-<i>, each with a key and an SDK
// client whose API requests api counts, ready for perTenant batches.
func newTenants(t *testing.T, ctx context.Context, rt *localrun.Runtime, prefix string, n, perTenant int, api *apiCounter) []*tenantRun {
	t.Helper()
	tenants := make([]*tenantRun, n)
	for i := range tenants {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		key, err := rt.Key(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tenants[i] = &tenantRun{name: name, key: key, client: sdkClient(rt.URL, key, api),
			batches: make([]*openai.Batch, perTenant), inputs: make([]string, perTenant), ids: make([][]string, perTenant)}
	}
	return tenants
}

// accounting is what the per-tenant check found.
type accounting struct {
	deadLetterMismatches              int64 // dead letters unlike the error file's rows
	countsOff                         int64 // batches whose request_counts disagree with their files
	usageOff                          int64 // tenants whose usage disagrees with their batches
	rows, completed, failed, answered int64
	lost, duplicated                  int64
	deadLetters                       int64
	errorCodes                        map[string]int64
	strayParts                        int
}

// checkTenant asserts, for every batch of one tenant: terminal, the
// accounting invariant (checkInvariant), usage counted once per answered
// row (the tenant's usage aggregates against its batches' lines and
// usage), and no part file without a committed chunk pointing to it.
func checkTenant(t *testing.T, rt *localrun.Runtime, tr *tenantRun) accounting {
	t.Helper()
	ctx := context.Background()
	acc := accounting{errorCodes: map[string]int64{}}
	var tokens int64
	for i, b := range tr.batches {
		if !terminal[b.Status] {
			t.Errorf("%s: batch %s is %s, want terminal", tr.name, b.ID, b.Status)
			continue
		}
		out, errs := checkInvariant(t, tr.client, b, tr.ids[i])
		if rc := b.RequestCounts; rc.Total != int64(len(tr.ids[i])) || rc.Completed != int64(len(out)) || rc.Failed != int64(len(errs)) {
			acc.countsOff++
		}
		acc.rows += int64(len(tr.ids[i]))
		acc.completed += b.RequestCounts.Completed
		acc.failed += b.RequestCounts.Failed
		tokens += b.Usage.TotalTokens
		for _, id := range tr.ids[i] {
			_, o := out[id]
			_, e := errs[id]
			switch {
			case !o && !e:
				acc.lost++
			case o && e:
				acc.duplicated++
			}
		}
		for _, l := range out {
			if l.Response != nil {
				acc.answered++
			}
		}
		for _, l := range errs {
			switch {
			case l.Response != nil:
				acc.answered++
				acc.errorCodes[fmt.Sprintf("http %d", l.Response.StatusCode)]++
			case l.Error != nil:
				acc.errorCodes[l.Error.Code]++
				if l.Error.Code == "dead_letter" {
					acc.deadLetters++
				}
			}
		}
		acc.strayParts += checkParts(t, rt, tr.name, b.ID)
		acc.deadLetterMismatches += deadLetterMismatches(ctx, t, rt, tr, b.ID, errs)
	}
	var usage struct {
		Data []struct {
			Requests    int64 `json:"requests"`
			TotalTokens int64 `json:"total_tokens"`
		} `json:"data"`
	}
	if err := getJSON(ctx, rt.URL, tr.key, "/v1/usage?source=batch", &usage); err != nil {
		t.Errorf("%s: usage: %v", tr.name, err)
	}
	var requests, usageTokens int64
	for _, d := range usage.Data {
		requests += d.Requests
		usageTokens += d.TotalTokens
	}
	if (requests != acc.answered && !tr.workflows) || usageTokens != tokens {
		acc.usageOff++
		t.Errorf("%s: usage counts %d requests and %d tokens; the batches have %d answered rows and %d tokens: usage must count each row once",
			tr.name, requests, usageTokens, acc.answered, tokens)
	}
	return acc
}

// checkParts reports the part objects of a batch that no committed chunk
// points to, and returns how many there are.
func checkParts(t *testing.T, rt *localrun.Runtime, tenant, id string) int {
	t.Helper()
	ctx := context.Background()
	chunks, err := rt.App.Store.Chunks(ctx, id)
	if err != nil {
		t.Errorf("chunks of %s: %v", id, err)
		return 0
	}
	committed := map[string]bool{}
	for _, ch := range chunks {
		for _, kind := range []string{"out", "err", "usage"} {
			committed[ch.Parts(kind)] = true
		}
	}
	keys, err := rt.App.Blobs.List(ctx, batch.PartsPrefix(tenant, id))
	if err != nil {
		t.Errorf("parts of %s: %v", id, err)
		return 0
	}
	stray := 0
	for _, k := range keys {
		if !committed[k] {
			t.Errorf("part %s is left behind: no committed chunk points to it", k)
			stray++
		}
	}
	return stray
}

// deadLetterMismatches reads every page of batch id's dead-letter list and
// counts the entries unlike errs, the error file's rows (docs/api.md
// "Dead letters"): a row not in it, listed twice or with another reason
// than its line's; and the rows of errs it does not list. A late run that
// committed must leave no phantom entry, a dead chunk none missing.
func deadLetterMismatches(ctx context.Context, t *testing.T, rt *localrun.Runtime, tr *tenantRun, id string, errs map[string]resultLine) int64 {
	t.Helper()
	listed := map[string]int{}
	var bad int64
	for after := ""; ; {
		var page struct {
			Data []struct {
				CustomID string `json:"custom_id"`
				Reason   string `json:"reason"`
			} `json:"data"`
			HasMore bool   `json:"has_more"`
			LastID  string `json:"last_id"`
		}
		if err := getJSON(ctx, rt.URL, tr.key, "/v1/batches/"+id+"/dead_letters?limit=1000&after="+after, &page); err != nil {
			t.Errorf("%s: dead letters of %s: %v", tr.name, id, err)
			return bad + 1
		}
		for _, d := range page.Data {
			listed[d.CustomID]++
			if l, ok := errs[d.CustomID]; !ok || listed[d.CustomID] > 1 || d.Reason != reasonOf(l) {
				t.Errorf("%s: batch %s lists %s as a dead letter (%s, %d times); its line is %+v", tr.name, id, d.CustomID, d.Reason, listed[d.CustomID], l)
				bad++
			}
		}
		if !page.HasMore {
			break
		}
		after = page.LastID
	}
	for cid := range errs {
		if listed[cid] == 0 {
			t.Errorf("%s: batch %s does not list %s as a dead letter", tr.name, id, cid)
			bad++
		}
	}
	return bad
}

// reasonOf is the dead-letter reason of error line l.
func reasonOf(l resultLine) string {
	if l.Error != nil {
		return l.Error.Code
	}
	return "upstream_error"
}

// getJSON GETs path with key, for routes the SDK lacks.
func getJSON(ctx context.Context, baseURL, key, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

// statusOf is an API error's HTTP status, 0 for success and -1 for no answer.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var e *openai.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return -1
}
