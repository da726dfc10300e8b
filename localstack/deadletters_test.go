package localstack

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/local/esm"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/store"
)

// deadLetter is an entry of GET /v1/batches/{id}/dead_letters.
type deadLetter struct {
	CustomID   string `json:"custom_id"`
	Row        int    `json:"row"`
	Reason     string `json:"reason"`
	Error      string `json:"error"`
	Attempts   int    `json:"attempts"`
	LastStatus *int   `json:"last_status"`
	Model      string `json:"model"`
}

// deadLetters reads every page of batch id's dead-letter list, limit
// entries a page.
func deadLetters(t *testing.T, rt *localrun.Runtime, key, id string, limit int) []deadLetter {
	t.Helper()
	var all []deadLetter
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	for {
		var page struct {
			Data    []deadLetter `json:"data"`
			HasMore bool         `json:"has_more"`
			LastID  string       `json:"last_id"`
		}
		if err := json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+id+"/dead_letters?"+q.Encode()), &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Data...)
		if !page.HasMore {
			return all
		}
		q.Set("after", page.LastID)
	}
}

// soloModel is a model without a fallback (a row it answers 503 fails
// there), whose slots run one chunk at a time.
const soloModel = `
models:
  - {name: solo, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 8, timeout: 5s}
`

// A batch whose rows fail every way a row can after its retry cycle: rows
// the upstream keeps answering 503 (after their 4 attempts), a chunk
// whose executor dies on every run (dead-lettered), and chunks the
// tenant's budget refuses. Its dead-letter list names every one of them
// (and only them: the error file's rows) with its reason, its real
// attempts, its last upstream status and the model it was for; /retry
// runs exactly that list again.
func TestDeadLettersListEveryFailedRow(t *testing.T) {
	t.Parallel()
	var retrying atomic.Bool
	rt := runtime(t, shortLease, withModels(t, soloModel), func(o *localrun.Options) {
		o.OnInvoke = func(fn string, ev events.SQSEvent) error {
			if fn == "executor" && hasChunk(ev, 1) && !retrying.Load() {
				return esm.ErrCrash // chunk 1's executor dies on every run
			}
			return nil
		}
		wire := o.Wire
		o.Wire = func(a *app.App) {
			if wire != nil {
				wire(a)
			}
			// Chunk 1 must not run as chunk 0's continuation, and the
			// budget raised before the retry must be read at once.
			a.Engine.NoContinuations = true
			a.Govern.TTL = time.Nanosecond
			// Chunk 1's crashed runs are taken over when their lease
			// ends; one of 3 s could end chunk 0's run in its retries on a
			// loaded machine (a late heartbeat) and hand its 500 rows to a
			// run the spent budget refuses.
			a.Engine.Lease = 8 * time.Second
		}
	})
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	rows := modelRows(nRows(40, "hello"), "solo")
	// 503 is retried as 500 is, but is an overload, not a failure the
	// model's circuit counts: three rows answered 500 open it, and their
	// nine retries then go one per cooldown of 5 s, 20 to 35 s, past the
	// 27 s an executor invocation runs here (shortLease's 30 s timeout);
	// rows stopped there run again, where the spent budget refuses them.
	for i := range 3 {
		rows[i].content = "[[mock:503]] broken"
	}
	created := createBatch(t, c, upload(t, c, "in.jsonl", jsonlRows(rows)).ID)
	// A row "hello N" costs 6 tokens: chunk 0's 7 answered rows spend the
	// budget of 10, so chunks 2 and 3 are refused when their runs start.
	// It is set once the batch is created: a budget the batch's estimate
	// does not fit refuses the create (docs/api.md "Budgets, revocation and
	// allow-lists", reservations), and the read is not cached (TTL).
	if err := rt.App.Store.PutBudget(ctx, "acme", store.Budget{MonthlyTokens: 10}); err != nil {
		t.Fatal(err)
	}
	b := waitBatch(t, c, created.ID)
	if b.Status != "completed" {
		t.Fatalf("status %s", b.Status)
	}
	_, errs := checkAccounting(t, rt, c, key, b, idsOf(rows))

	dls := deadLetters(t, rt, key, b.ID, 4)
	var ids []string
	byReason := map[string]int{}
	for _, d := range dls {
		ids = append(ids, d.CustomID)
		byReason[d.Reason]++
		if _, ok := errs[d.CustomID]; !ok || d.Error == "" || d.Model != "solo" {
			t.Errorf("dead letter %+v: want a row of the error file, with its error and model", d)
		}
		var want deadLetter
		switch {
		case d.Row < 3:
			want = deadLetter{Reason: "upstream_error", Attempts: 4, LastStatus: ptr(503)}
		case d.Row >= 10 && d.Row < 20:
			want = deadLetter{Reason: "dead_letter", Attempts: resources.WorkMaxReceiveCount}
		case d.Row >= 20:
			want = deadLetter{Reason: govern.CodeBudgetExceeded}
		default:
			t.Errorf("dead letter %+v: a row that completed", d)
			continue
		}
		if d.Reason != want.Reason || d.Attempts != want.Attempts || !samePtr(d.LastStatus, want.LastStatus) {
			t.Errorf("dead letter %+v: want reason %s, %d attempts, last status %v", d, want.Reason, want.Attempts, want.LastStatus)
		}
	}
	if len(dls) != len(errs) || byReason["upstream_error"] != 3 || byReason["dead_letter"] != 10 || byReason[govern.CodeBudgetExceeded] != 20 {
		t.Fatalf("dead letters by reason %v (%d), error file %d rows: want 3 upstream_error, 10 dead_letter, 20 budget_exceeded", byReason, len(dls), len(errs))
	}
	if !slices.IsSortedFunc(dls, func(a, b deadLetter) int { return a.Row - b.Row }) {
		t.Errorf("dead letters out of row order: %v", ids)
	}

	// The retry runs that list, and only it.
	retrying.Store(true)
	if err := rt.App.Store.PutBudget(ctx, "acme", store.Budget{MonthlyTokens: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+b.ID+"/retry", nil)
	var nb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &nb); status != 200 || err != nil {
		t.Fatalf("retry: %d %s", status, body)
	}
	rb := waitBatch(t, c, nb.ID)
	var retried []string
	for _, l := range readLines(t, content(t, c, rb.InputFileID)) {
		retried = append(retried, l.CustomID)
	}
	if !slices.Equal(retried, ids) || rb.RequestCounts.Total != int64(len(ids)) || rb.RequestCounts.Failed != 3 {
		t.Fatalf("the retry ran %v (%+v), want the dead letters %v, the 3 broken rows failing again", retried, rb.RequestCounts, ids)
	}
	if again := deadLetters(t, rt, key, rb.ID, 100); len(again) != 3 || again[0].Reason != "upstream_error" {
		t.Fatalf("the retry's dead letters: %+v, want the 3 broken rows", again)
	}
}

func ptr[T any](v T) *T { return &v }

func samePtr(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
