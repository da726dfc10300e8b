//go:build browser

package localstack

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testBrowserOperations: an admin key's Operations page shows, from a
// running batch, the model's slots in flight against its capacity and the
// batch waiting for more, and its key's state (live, concurrency limit,
// 429s per minute, circuit); the upstream answers of a finished batch's rows
// (its 400s as 4xx); the four dead-letter queues empty and no stuck chunk
// (internal/ops, what relay admin reads). A key without the admin scope
// is refused the page's data; another tenant's admin key sees the figures
// but not acme's batches.
func testBrowserOperations(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	admin, err := rt.Key(context.Background(), "acme", "admin")
	if err != nil {
		t.Fatal(err)
	}
	rival, err := rt.Key(context.Background(), "rival", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if status, body := rawDo(t, rt, key, "GET", "/v1/admin/operations", nil); status != 403 {
		t.Errorf("GET /v1/admin/operations with a files,batches key: %d %s, want 403", status, body)
	}
	rows := nRows(6, "fine")
	for i := range 2 {
		rows[i].content = fmt.Sprintf("refused %d [[mock:400]]", i)
	}
	done := waitBatch(t, c, createBatch(t, c, upload(t, c, "done.jsonl", jsonlRows(rows)).ID).ID)
	if done.RequestCounts.Completed != 4 || done.RequestCounts.Failed != 2 {
		t.Fatalf("batch %s: %+v, want 4 completed and 2 failed", done.ID, done.RequestCounts)
	}
	slow := createBatch(t, c, upload(t, c, "slow.jsonl", jsonlRows(nRows(64, "[[mock:sleep=1s]] slow"))).ID)
	t.Cleanup(func() { c.Batches.Cancel(context.Background(), slow.ID) })

	p := openPanel(t, browserCtx, rt, admin, 1280, 800, false)
	p.signIn()
	p.do("open the Operations page", chromedp.Click(chromedp.CSS(`#nav a[href="#/operations"]`)))
	p.waitVisible("the models table", `#ops-body [aria-label="Capacity per model"] tbody tr`)
	cells := func(table string) [][]string {
		return eval[[][]string](p, fmt.Sprintf(`[...document.querySelectorAll('#ops-body [aria-label=%s] tbody tr')]
			.map((tr) => [...tr.cells].map((c) => c.textContent))`, js(table)))
	}
	// gpt-4o-mini: in flight, capacity 8, the slow batch waiting for more.
	p.wait("gpt-4o-mini's slots in flight with "+slow.ID+" waiting", 30*time.Second, fmt.Sprintf(`[...document.querySelectorAll('#ops-body [aria-label="Capacity per model"] tbody tr')]
		.some((tr) => tr.cells[0].textContent === 'gpt-4o-mini' && +tr.cells[1].textContent > 0 && tr.cells[2].textContent === '8' && tr.cells[3].textContent.includes(%s))`, js(slow.ID)))
	var upstream []string
	for _, r := range cells("Upstream answers per model") {
		if r[0] == "gpt-4o-mini" {
			upstream = r
		}
	}
	// The slow batch's rows commit as they run: its answers are 200s.
	if len(upstream) != 7 || upstream[2] != "2" || upstream[3] != "2" || upstream[4] != "0" || upstream[5] != "0" || upstream[6] != "0" {
		t.Errorf("gpt-4o-mini's upstream answers %q: want 2 failed, 2 4xx, no 429, 5xx or none", upstream)
	}
	// Its key, as the executor published it while the rows ran.
	p.wait("gpt-4o-mini's key live, its limit and circuit", 30*time.Second, `[...document.querySelectorAll('#ops-body [aria-label="Keys per model"] tbody tr')]
		.some((tr) => [...tr.cells].map((c) => c.textContent).join('|') === 'gpt-4o-mini|RELAY_TEST_KEY|live|8|—|—|0|closed')`)
	dlqs := cells("Dead-letter queue depths")
	if fmt.Sprint(dlqs) != "[[dispatch-dlq 0] [finalize-dlq 0] [webhook-dlq 0] [work-dlq 0]]" {
		t.Errorf("dead-letter queues %v, want the four, empty", dlqs)
	}
	if stuck := eval[string](p, `document.querySelector('#ops-body [aria-labelledby="ops-stuck-title"]')?.textContent || ''`); !strings.Contains(stuck, "None") {
		t.Errorf("stuck chunks: %q, want none", stuck)
	}
	// Another tenant's admin key sees the figures, not acme's batches.
	if status, body := rawDo(t, rt, rival, "GET", "/v1/admin/operations", nil); status != 200 || strings.Contains(string(body), slow.ID) {
		t.Errorf("GET /v1/admin/operations with another tenant's admin key: %d %s, want 200 without %s", status, body, slow.ID)
	}
	p.screenshot("operations", true)
}
