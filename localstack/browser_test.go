//go:build browser

package localstack

// Browser tests of the panel (README "What it does"): headless Chromium, driven with
// chromedp, against a local runtime of each test's own. They need Debian's
// chromium package at /usr/bin/chromium (make test installs it when missing:
// test-deps in the Makefile, whose CHROMIUM is this path); without it they
// fail and say so. They build only with the browser tag (README "Tests"),
// which make test sets; -short skips them, as every emulator test.
//
// Screenshots of the main pages are taken on every run and checked; they are
// written to docs/screenshots/ only with RELAY_SCREENSHOTS=1, so a test run
// does not change the tree:
//
//	RELAY_SCREENSHOTS=1 go test -tags browser ./localstack -run TestBrowser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/store"
)

// chromiumPath is where Debian's chromium package puts the browser.
const chromiumPath = "/usr/bin/chromium"

// TestBrowser runs the panel's browser tests as parallel subtests that share
// one Chromium; each has its own runtime, tab and browser context (fresh
// storage and download settings).
func TestBrowser(t *testing.T) {
	t.Parallel()
	browserCtx := startChromium(t)
	tests := []struct {
		name string
		run  func(t *testing.T, browserCtx context.Context)
	}{
		{"UploadTwoFilesWatchThemCompleteAndDownload", testBrowserUploadTwoFiles},
		{"PresignedUploadOver4MiB", testBrowserPresignedUpload},
		{"CancelRunningBatch", testBrowserCancel},
		{"BadFilesShowErrors", testBrowserBadFiles},
		{"NarrowScreenAndKeyboard", testBrowserNarrowAndKeyboard},
		{"LateAnswerDoesNotRewindStatus", testBrowserLateAnswer},
		{"ModelPickerOffersConfiguredModels", testBrowserModelPicker},
		{"UsageChartShowsSpendAgainstBudget", testBrowserUsageChart},
		{"UploadPromptJSONLAndCSVWithOneModel", testBrowserSimpleRows},
		{"OperationsPageShowsARunningBatch", testBrowserOperations},
		{"ProgressChartShowsTheETABand", testBrowserProgressChart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, browserCtx)
		})
	}
}

// startChromium starts headless Chromium (a fresh profile in a temporary
// directory, removed at the end) and returns a context that holds it.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Chromium at %s: install Debian's chromium package "+
			"(apt-get install chromium; make test installs it when missing): %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // as root in a container
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v", chromiumPath, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30s", chromiumPath)
	}
	return ctx
}

// tab is one browser tab on the panel of rt, signed in (or not yet) with key.
type tab struct {
	t         *testing.T
	ctx       context.Context
	rt        *localrun.Runtime
	key       string
	downloads string

	mu       sync.Mutex
	requests map[network.RequestID]*sentRequest
	order    []network.RequestID
	problems []string // uncaught exceptions and CSP violations
}

// sentRequest is what the network domain told about one request.
type sentRequest struct {
	method, url string
	headers     network.Headers
	status      int64
	failure     string // net error or CORS error, when it failed
}

// openPanel opens the panel of rt in a new tab of a viewport w×h. At the end
// of the test it checks every request the tab made: the key never in a URL,
// never in a cookie, always in the Authorization header of API requests; and
// no uncaught exception or CSP violation.
func openPanel(t *testing.T, browserCtx context.Context, rt *localrun.Runtime, key string, w, h int64, mobile bool) *tab {
	t.Helper()
	p := &tab{t: t, rt: rt, key: key, downloads: t.TempDir(), requests: map[network.RequestID]*sentRequest{}}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext(), chromedp.WithListener(p.listen))
	p.ctx = ctx
	t.Cleanup(p.checkRequests) // runs after the tab is closed (cleanups are LIFO)
	t.Cleanup(cancel)
	t.Cleanup(p.checkStorage) // runs while the tab is open
	// The first run opens the tab and binds it to the context it gets: give
	// it the tab's own, not one with the time limit of an action.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	var emulate []chromedp.EmulateViewportOption
	if mobile {
		emulate = append(emulate, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	p.do("open the panel", chromedp.EmulateViewport(w, h, emulate...), chromedp.Navigate(rt.URL+"/"))
	_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior:         browser.SetDownloadBehaviorBehaviorAllow,
		BrowserContextID: chromedp.FromContext(ctx).BrowserContextID,
		DownloadPath:     p.downloads,
	})
	if err != nil {
		t.Fatalf("set the download directory: %v", err)
	}
	p.waitVisible("the page's script to show the key form or the list", "#login, #list-view")
	return p
}

// listen runs in the tab's event loop: it records and returns at once.
func (p *tab) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		u := ev.Request.URL + ev.Request.URLFragment
		if _, ok := p.requests[ev.RequestID]; !ok {
			p.order = append(p.order, ev.RequestID)
		}
		p.requests[ev.RequestID] = &sentRequest{method: ev.Request.Method, url: u, headers: ev.Request.Headers}
		if strings.Contains(ev.DocumentURL, p.key) {
			p.problems = append(p.problems, "the key is in a document URL: "+ev.DocumentURL)
		}
	case *network.EventRequestWillBeSentExtraInfo:
		// The headers as sent, cookies included (requestWillBeSent has
		// only those the page set).
		if c := header(ev.Headers, "Cookie"); c != "" {
			p.problems = append(p.problems, "a request carried a cookie: "+c)
		}
	case *network.EventResponseReceived:
		if r := p.requests[ev.RequestID]; r != nil {
			r.status = ev.Response.Status
		}
	case *network.EventLoadingFailed:
		if r := p.requests[ev.RequestID]; r != nil {
			r.failure = ev.ErrorText
			if ev.CorsErrorStatus != nil {
				r.failure += fmt.Sprintf(" (CORS: %s %s)", ev.CorsErrorStatus.CorsError, ev.CorsErrorStatus.FailedParameter)
			}
		}
	case *cdpruntime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		p.problems = append(p.problems, fmt.Sprintf("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *cdplog.EventEntryAdded:
		if strings.Contains(ev.Entry.Text, "Content Security Policy") {
			p.problems = append(p.problems, "CSP violation: "+ev.Entry.Text)
		}
	}
}

// sent returns the requests so far, in the order they were sent.
func (p *tab) sent() []sentRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]sentRequest, 0, len(p.order))
	for _, id := range p.order {
		out = append(out, *p.requests[id])
	}
	return out
}

func (p *tab) checkRequests() {
	t := p.t
	reqs := p.sent()
	api := 0
	for _, r := range reqs {
		if strings.Contains(r.url, p.key) || strings.Contains(r.url, url.QueryEscape(p.key)) {
			t.Errorf("the key is in the URL of %s %s", r.method, r.url)
		}
		if strings.HasPrefix(r.url, p.rt.URL+"/v1/") {
			api++
			if got := header(r.headers, "Authorization"); got != "Bearer "+p.key {
				t.Errorf("%s %s: Authorization header %q, want the key as a bearer token", r.method, r.url, got)
			}
		}
	}
	if api == 0 && !t.Failed() {
		t.Errorf("the tab made no API request (of %d requests)", len(reqs))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.problems {
		t.Error(s)
	}
}

// checkStorage checks that the key is in no cookie and not in
// localStorage (sessionStorage holds it when "Remember for this tab" is
// ticked, by design).
func (p *tab) checkStorage() {
	t := p.t
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	res, err := chromedp.CallBrowser(ctx, storage.GetCookies, storage.GetCookiesParams{
		BrowserContextID: chromedp.FromContext(p.ctx).BrowserContextID,
	})
	if err != nil {
		t.Errorf("read the cookies: %v", err)
	}
	for _, c := range res.Cookies {
		if strings.Contains(c.Value, p.key) || strings.Contains(c.Value, url.QueryEscape(p.key)) {
			t.Errorf("the key is in cookie %s", c.Name)
		}
	}
	local, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(localStorage)`))
	if err != nil || strings.Contains(local, p.key) {
		t.Errorf("localStorage: %q, %v; the key must not be in it", local, err)
	}
}

func header(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}

// do runs actions in the tab, with a time limit.
func (p *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.state())
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *tab, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// visibleJS is true when an element matches sel and is rendered.
func visibleJS(sel string) string {
	return fmt.Sprintf(`[...document.querySelectorAll(%s)].some((e) => e.getClientRects().length > 0)`, js(sel))
}

// wait polls a JavaScript condition until it holds.
func (p *tab) wait(what string, limit time.Duration, cond string) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("Boolean("+cond+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waited %v for %s (last error: %v)\n%s", limit, what, err, p.state())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *tab) waitVisible(what, sel string) {
	p.t.Helper()
	p.wait(what+" ("+sel+" visible)", 20*time.Second, visibleJS(sel))
}

// state describes the page, for failure messages.
func (p *tab) state() string {
	ctx, cancel := context.WithTimeout(p.ctx, 3*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		hash: location.hash,
		error: document.querySelector('#error')?.textContent,
		notice: document.querySelector('#notice')?.textContent,
		uploads: [...document.querySelectorAll('#uploads li')].map((li) => [li.dataset.state, li.dataset.batchId, li.textContent]),
		batches: [...document.querySelectorAll('#batches tbody tr')].map((tr) => [tr.dataset.batchId, tr.dataset.status, tr.textContent]),
		batch: document.querySelector('#batch')?.dataset.status,
		focus: document.activeElement?.id || document.activeElement?.tagName,
	}, null, 1)`))
	if err != nil {
		return "page state: " + err.Error()
	}
	return "page state: " + s
}

// signIn types the key in the key form and submits it.
func (p *tab) signIn() {
	p.t.Helper()
	p.waitVisible("the key form", "#key")
	p.do("enter the key", chromedp.SendKeys(chromedp.ID("key"), p.key), chromedp.Click(chromedp.ID("key-save")))
	p.waitVisible("the batches list after sign-in", "#list-view")
	// The model field is filled from GET /v1/models: a CSV needs it.
	p.wait("the configured models", 20*time.Second, `document.querySelector('#models option') && document.querySelector('#model').value !== ''`)
	if v := eval[string](p, `document.querySelector('#key').value`); v != "" {
		p.t.Errorf("the key input still holds %q after sign-in", v)
	}
}

// upload chooses files in the file input and submits the upload form.
func (p *tab) upload(paths ...string) {
	p.t.Helper()
	p.do("choose and upload "+strings.Join(paths, ", "),
		chromedp.SetUploadFiles(chromedp.ID("files"), paths), chromedp.Click(chromedp.ID("upload")))
}

// uploadCount is the number of #uploads entries in state.
func uploadCount(state string) string {
	return fmt.Sprintf(`document.querySelectorAll('#uploads li[data-state=%s]').length`, state)
}

// uploadedBatch waits for the upload of the file named name to create its
// batch and returns the batch's id.
func (p *tab) uploadedBatch(name string) string {
	p.t.Helper()
	find := fmt.Sprintf(`[...document.querySelectorAll('#uploads li')].find((li) => li.querySelector('.name')?.textContent === %s)`, js(name))
	p.wait("the upload of "+name+" to create a batch", 30*time.Second, find+`?.dataset.state !== 'uploading'`)
	state := eval[string](p, find+`.dataset.state`)
	if state != "done" {
		p.t.Fatalf("upload of %s: state %s\n%s", name, state, p.state())
	}
	id := eval[string](p, find+`.dataset.batchId || ''`)
	if !strings.HasPrefix(id, "batch_") {
		p.t.Fatalf("upload of %s: data-batch-id %q\n%s", name, id, p.state())
	}
	return id
}

func rowSel(id string) string { return fmt.Sprintf(`#batches tbody tr[data-batch-id=%s]`, js(id)) }

// waitRow waits for the batches list to show batch id in status.
func (p *tab) waitRow(id, status string, limit time.Duration) {
	p.t.Helper()
	p.wait(fmt.Sprintf("batch %s to be %s in the list", id, status), limit,
		fmt.Sprintf(`document.querySelector(%s)?.dataset.status === %s`, js(rowSel(id)), js(status)))
}

// watchStatuses records, for each row of the batches list, the sequence of
// data-status values it shows, as the list's polling changes them.
func (p *tab) watchStatuses() {
	p.t.Helper()
	eval[bool](p, `(() => {
		const seen = window.__statuses = {};
		const rec = (tr) => {
			const id = tr.dataset?.batchId, s = tr.dataset?.status;
			if (!id || !s) return;
			const l = (seen[id] ||= []);
			if (l.at(-1) !== s) l.push(s);
		};
		document.querySelectorAll('#batches tbody tr').forEach(rec);
		new MutationObserver((ms) => ms.forEach((m) => {
			if (m.type === 'attributes') rec(m.target);
			m.addedNodes.forEach((n) => n.nodeName === 'TR' && rec(n));
		})).observe(document.querySelector('#batches tbody'),
			{ subtree: true, childList: true, attributes: true, attributeFilter: ['data-status'] });
		return true;
	})()`)
}

func (p *tab) statuses() map[string][]string {
	return eval[map[string][]string](p, `window.__statuses`)
}

// download clicks a download button of the batch page and returns the
// saved file's content.
func (p *tab) download(button, filename string) []byte {
	p.t.Helper()
	p.waitVisible("the "+button+" button", "#"+button)
	p.do("click "+button, chromedp.Click(chromedp.ID(button)))
	path := filepath.Join(p.downloads, filename)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if data, err := os.ReadFile(path); err == nil {
			return data
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(p.downloads)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			p.t.Fatalf("%s: %s was not downloaded (download directory has %v)\n%s", button, filename, names, p.state())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot captures the viewport as PNG, checks it and, with
// RELAY_SCREENSHOTS=1, saves it as docs/screenshots/<name>.png.
func (p *tab) screenshot(name string, full bool) {
	p.t.Helper()
	// Let the page settle: no focus ring on a clicked button, fonts laid out.
	eval[bool](p, `(document.activeElement?.blur(), true)`)
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	img, err := chromedp.Run(ctx, shot)
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil || cfg.Width < 300 || cfg.Height < 300 {
		p.t.Fatalf("screenshot %s: not a sensible PNG (%v, %dx%d)", name, err, cfg.Width, cfg.Height)
	}
	if os.Getenv("RELAY_SCREENSHOTS") != "1" {
		return
	}
	dir := filepath.Join("..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), img, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("saved docs/screenshots/%s.png (%dx%d, %d KiB)", name, cfg.Width, cfg.Height, len(img)>>10)
}

// noHorizontalScroll fails the test when the page is wider than the viewport.
func (p *tab) noHorizontalScroll(where string) {
	p.t.Helper()
	got := eval[[]float64](p, `[document.documentElement.scrollWidth, document.documentElement.clientWidth, window.innerWidth]`)
	if got[0] > got[1] || got[0] > got[2] {
		wide := eval[string](p, `[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
			.slice(0, 5).map((e) => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className).join(', ')`)
		p.t.Errorf("%s: the page scrolls sideways: scrollWidth %v > viewport %v (too wide: %s)", where, got[0], got[1], wide)
	}
}

// writeFile writes a test input file and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// customIDs returns the custom_id of every line of a results file.
func customIDs(t *testing.T, what string, data []byte) []string {
	t.Helper()
	var ids []string
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var l struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.CustomID == "" {
			t.Fatalf("%s line %d is not a result line: %q (%v)", what, i+1, line, err)
		}
		ids = append(ids, l.CustomID)
	}
	return ids
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// lifecycle is the order of the statuses of a batch that completes.
var lifecycle = []string{"validating", "in_progress", "finalizing", "completed"}

// testBrowserUploadTwoFiles: enter a key; upload a JSONL and a CSV file at
// once; watch both batches complete in the list; open one; download its
// results, output and errors.
func testBrowserUploadTwoFiles(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	dir := t.TempDir()
	rows := nRows(12, "[[mock:sleep=500ms]] question")
	rows[3].content = "[[mock:400]] a row the model refuses"
	jsonlPath := writeFile(t, dir, "questions.jsonl", jsonlRows(rows))
	csvPath := writeFile(t, dir, "prompts.csv", []byte("prompt\nfirst question\n\"second, with a comma\"\nthird\n"))
	// Simple rows (docs/api.md "Files"): {prompt} lines, on the model picked once.
	simplePath := writeFile(t, dir, "simple.jsonl", []byte(`{"prompt":"a simple question"}`+"\n"+`{"prompt":"another one"}`+"\n"))

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.waitVisible("the key form", "#key")
	if help := eval[string](p, `document.querySelector('#key-help').textContent`); !strings.Contains(help, "make dev") || !strings.Contains(help, "relay keys create") {
		t.Errorf("the sign-in help says %q: want where a key comes from (make dev, relay keys create)", help)
	}
	p.screenshot("key-entry", false)
	p.signIn()
	p.watchStatuses()
	p.upload(jsonlPath, csvPath, simplePath)
	jsonlID, csvID, simpleID := p.uploadedBatch("questions.jsonl"), p.uploadedBatch("prompts.csv"), p.uploadedBatch("simple.jsonl")
	if n := eval[int](p, uploadCount("done")); n != 3 {
		t.Fatalf("%d uploads done, want 3\n%s", n, p.state())
	}
	for _, id := range []string{jsonlID, csvID, simpleID} {
		p.waitRow(id, "completed", 60*time.Second)
	}
	sb := waitBatch(t, c, simpleID)
	if sb.Model != "gpt-4o-mini" || sb.RequestCounts.Completed != 2 {
		t.Errorf("{prompt} JSONL batch: model %q, counts %+v; want gpt-4o-mini, 2 completed", sb.Model, sb.RequestCounts)
	}
	checkInvariant(t, c, sb, []string{"row-1", "row-2"})

	// The list followed each batch through its lifecycle by polling.
	seen := p.statuses()
	t.Logf("statuses the list showed: %v", seen)
	for _, id := range []string{jsonlID, csvID} {
		l := seen[id]
		last := -1
		for _, s := range l {
			i := slices.Index(lifecycle, s)
			if i <= last {
				t.Errorf("batch %s: the list showed statuses %v, not in lifecycle order", id, l)
				break
			}
			last = i
		}
		if len(l) == 0 || l[len(l)-1] != "completed" {
			t.Errorf("batch %s: the list showed statuses %v, want to end with completed", id, l)
		}
	}
	if l := seen[jsonlID]; len(l) < 2 {
		t.Errorf("batch %s (slow rows): the list showed statuses %v, want it seen running before completed", jsonlID, l)
	}
	progress := eval[string](p, fmt.Sprintf(`document.querySelector(%s + ' .progress').textContent`, js(rowSel(jsonlID))))
	if progress != "12/12 (1 failed)" {
		t.Errorf("progress of %s: got %q, want 12/12 (1 failed)", jsonlID, progress)
	}

	// The batches are what the panel asked for: the CSV with the chosen model.
	cb := waitBatch(t, c, csvID)
	if cb.Model != "gpt-4o-mini" || cb.Endpoint != "/v1/chat/completions" {
		t.Errorf("CSV batch: model %q endpoint %q, want gpt-4o-mini on /v1/chat/completions", cb.Model, cb.Endpoint)
	}
	checkInvariant(t, c, cb, []string{"row-1", "row-2", "row-3"})
	jb := waitBatch(t, c, jsonlID)
	checkInvariant(t, c, jb, idsOf(rows))

	// Open the JSONL batch from the list.
	p.do("open batch "+jsonlID, chromedp.Click(chromedp.CSS(rowSel(jsonlID)+" a")))
	p.wait("the batch page of "+jsonlID, 20*time.Second, `document.querySelector('#batch')?.dataset.status === 'completed'`)
	p.waitVisible("the retry button (one row failed)", "#retry")
	p.wait("the error lines of the batch page", 20*time.Second,
		`[...document.querySelectorAll('#batch td')].some((td) => td.textContent === 'r0003')`)
	// The dead-letter rows name the failed row, why, after how many
	// attempts, its last status and model (docs/api.md "Dead letters").
	p.wait("the dead-letter rows of the batch page", 20*time.Second,
		`[...document.querySelectorAll('[aria-label="Dead-letter rows"] tbody tr')].some((tr) =>
			/^3\s+r0003\s+upstream_error\s+the upstream answered 400\s+1\s+400\s+gpt-4o-mini$/.test(tr.innerText.trim()))`)
	p.waitVisible("the download buttons", "#download-results")
	if eval[bool](p, visibleJS("#cancel")) {
		t.Errorf("the cancel button shows on a completed batch")
	}
	text := eval[string](p, `document.querySelector('#batch').innerText`)
	for _, want := range []string{jsonlID, "Total rows", "Input tokens", "Created", "Completed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the batch page does not show %q:\n%s", want, text)
		}
	}
	p.screenshot("batch-page", true)

	results := p.download("download-results", jsonlID+"-results.jsonl")
	if got := customIDs(t, "results", results); len(got) != len(rows) || !sameSet(got, idsOf(rows)) {
		t.Errorf("results file: %d lines with ids %v, want one line per row (%d)", len(got), got, len(rows))
	}
	if got := customIDs(t, "output", p.download("download-output", jsonlID+"-output.jsonl")); len(got) != len(rows)-1 {
		t.Errorf("output file: %d lines, want %d", len(got), len(rows)-1)
	}
	if got := customIDs(t, "errors", p.download("download-errors", jsonlID+"-errors.jsonl")); !slices.Equal(got, []string{"r0003"}) {
		t.Errorf("error file: ids %v, want [r0003]", got)
	}
}

// testBrowserPresignedUpload: a file over the 4 MiB request limit goes to
// the emulator's S3 through a presigned PUT from the browser (CORS).
func testBrowserPresignedUpload(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	pad := strings.Repeat("lorem ipsum ", 4400) // ~52 KB a row
	rows := nRows(100, pad)
	data := jsonlRows(rows)
	if len(data) <= 5<<20 {
		t.Fatalf("the big file has %d bytes, want more than 5 MiB", len(data))
	}
	path := writeFile(t, t.TempDir(), "big.jsonl", data)

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	p.upload(path)
	id := p.uploadedBatch("big.jsonl")

	var put *sentRequest
	for _, r := range p.sent() {
		if r.method == http.MethodPut {
			put = &r
		}
		if r.method == http.MethodPost && r.url == rt.URL+"/v1/files" && strings.HasPrefix(header(r.headers, "Content-Type"), "multipart/") {
			t.Errorf("the big file was posted as multipart to /v1/files, want the presigned upload")
		}
	}
	switch {
	case put == nil:
		t.Fatalf("no PUT to storage was sent\n%s", p.state())
	case !strings.HasPrefix(put.url, emutest.Endpoint(t)+"/"):
		t.Errorf("the presigned PUT went to %s, want the emulator's S3 at %s", put.url, emutest.Endpoint(t))
	case put.status != http.StatusOK:
		// A failure after a 200 is the unread response body being dropped.
		t.Errorf("the presigned PUT to %s: status %d, failure %q", put.url, put.status, put.failure)
	}
	p.waitRow(id, "completed", 60*time.Second)
	b := waitBatch(t, c, id)
	f, err := c.Files.Get(context.Background(), b.InputFileID)
	if err != nil || f.Bytes != int64(len(data)) {
		t.Fatalf("input file: %+v, %v; want %d bytes", f, err, len(data))
	}
	checkInvariant(t, c, b, idsOf(rows))
}

// testBrowserCancel: the list shows a running batch's progress; its page
// cancels it.
func testBrowserCancel(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	dir := t.TempDir()
	rows := nRows(96, "[[mock:sleep=1s]] slow") // 12 s at the model's concurrency of 8
	slow := writeFile(t, dir, "slow.jsonl", jsonlRows(rows))
	quick := writeFile(t, dir, "prompts.csv", []byte("prompt\nhello\nworld\n"))

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	p.upload(slow, quick)
	id, quickID := p.uploadedBatch("slow.jsonl"), p.uploadedBatch("prompts.csv")
	p.waitRow(quickID, "completed", 30*time.Second)
	p.wait("batch "+id+" to show progress in the list", 30*time.Second, fmt.Sprintf(
		`(() => { const v = document.querySelector(%s + ' progress')?.value || 0; return v > 0 && v < 96; })()`, js(rowSel(id))))
	p.screenshot("batch-list", false)

	p.do("open batch "+id, chromedp.Click(chromedp.CSS(rowSel(id)+" a")))
	p.wait("the batch page of "+id+" running", 20*time.Second, `document.querySelector('#batch')?.dataset.status === 'in_progress'`)
	p.waitVisible("the cancel button", "#cancel")
	p.do("cancel", chromedp.Click(chromedp.ID("cancel")))
	p.wait("batch "+id+" to be cancelled", 60*time.Second, `document.querySelector('#batch')?.dataset.status === 'cancelled'`)
	p.waitVisible("the results download of a cancelled batch", "#download-results")
	if eval[bool](p, visibleJS("#cancel")) {
		t.Errorf("the cancel button still shows on a cancelled batch")
	}
	if e := eval[string](p, `document.querySelector('#error').textContent`); e != "" {
		t.Errorf("error shown after cancel: %q", e)
	}

	b := waitBatch(t, c, id)
	_, errs := checkInvariant(t, c, b, idsOf(rows))
	cancelled := 0
	for _, l := range errs {
		if l.Error != nil && l.Error.Code == "batch_cancelled" {
			cancelled++
		}
	}
	if b.Status != "cancelled" || cancelled == 0 {
		t.Errorf("batch %s: status %s with %d rows cancelled, want cancelled with some", id, b.Status, cancelled)
	}
	p.waitVisible("the retry button (cancelled rows)", "#retry")

	// Back in the list, the batch shows cancelled too.
	p.do("back to the list", chromedp.Click(chromedp.CSS(`#batch a[href="#/"]`)))
	p.waitRow(id, "cancelled", 20*time.Second)
}

// testBrowserBadFiles: a file that fails validation makes a failed batch
// whose page lists the errors with their line numbers; files and choices the
// API refuses show its error message.
func testBrowserBadFiles(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	dir := t.TempDir()
	bad := string(jsonlRows(nRows(2, "fine"))) +
		"{this is not json\n" +
		`{"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini"}}` + "\n"
	badPath := writeFile(t, dir, "bad.jsonl", []byte(bad))

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()

	// Validation failure: the batch fails, its page shows each error's line.
	p.upload(badPath)
	id := p.uploadedBatch("bad.jsonl")
	p.waitRow(id, "failed", 30*time.Second)
	b := waitBatch(t, c, id)
	if b.Status != "failed" || len(b.Errors.Data) == 0 {
		t.Fatalf("batch %s: status %s, errors %+v; want failed with errors", id, b.Status, b.Errors.Data)
	}
	p.do("open batch "+id, chromedp.Click(chromedp.CSS(rowSel(id)+" a")))
	p.wait("the failed batch page", 20*time.Second, `document.querySelector('#batch')?.dataset.status === 'failed'`)
	p.wait("the validation errors", 20*time.Second, `document.querySelector('#batch [aria-label="Validation errors"] tbody tr')`)
	shown := eval[[][]string](p, `[...document.querySelectorAll('#batch [aria-label="Validation errors"] tbody tr')]
		.map((tr) => [...tr.cells].map((td) => td.textContent.replace(/^—$/, '')))`)
	var want [][]string
	lines := map[int64]bool{}
	for _, e := range b.Errors.Data {
		want = append(want, []string{fmt.Sprint(e.Line), e.Code, e.Param, e.Message})
		lines[e.Line] = true
	}
	if !lines[3] || !lines[4] {
		t.Errorf("API errors %+v: want lines 3 and 4", b.Errors.Data)
	}
	if !slices.EqualFunc(shown, want, slices.Equal) {
		t.Errorf("validation errors on the page:\n%q\nwant (line, code, param, message) as the API says:\n%q", shown, want)
	}
	if eval[bool](p, visibleJS("#cancel")) || eval[bool](p, visibleJS("#retry")) {
		t.Errorf("cancel or retry offered for a batch that failed validation")
	}
	p.do("back to the list", chromedp.Click(chromedp.CSS(`#batch a[href="#/"]`)))
	p.waitVisible("the list", "#list-view")

	// failedUpload uploads one file and returns the error the page shows.
	failedUpload := func(path string) string {
		t.Helper()
		before := eval[int](p, uploadCount("error"))
		p.upload(path)
		p.wait("the upload of "+filepath.Base(path)+" to fail", 20*time.Second, fmt.Sprintf(`%s > %d`, uploadCount("error"), before))
		if role := eval[string](p, `document.querySelector('#error').getAttribute('role')`); role != "alert" {
			t.Errorf("#error has role %q, want alert", role)
		}
		p.waitVisible("the error message", "#error")
		return eval[string](p, `document.querySelector('#error').textContent`)
	}

	// An empty file: the API refuses the upload, and says why.
	status, body := postMultipart(t, rt, key, "empty.jsonl", nil)
	apiMsg := errorMessage(t, status, body)
	got := failedUpload(writeFile(t, dir, "empty.jsonl", nil))
	if got != "empty.jsonl: "+apiMsg {
		t.Errorf("empty file: #error says %q, want the API's message %q", got, apiMsg)
	}

	// A CSV with a model that is not configured: the API refuses the batch.
	p.do("choose a model", chromedp.SetValue(chromedp.ID("model"), "no-such-model"))
	got = failedUpload(writeFile(t, dir, "prompts.csv", []byte("prompt\nhello\n")))
	if !strings.Contains(got, `model "no-such-model" is not a configured model (configured: gpt-4o-mini, `) || !strings.HasPrefix(got, "prompts.csv: ") {
		t.Errorf("CSV with an unknown model: #error says %q, want the API's message", got)
	}

	// A .txt file: the panel takes only .csv and .jsonl and says so before
	// sending anything.
	sentBefore := len(p.sent())
	got = failedUpload(writeFile(t, dir, "notes.txt", []byte("hello\n")))
	if got != "notes.txt: only .csv and .jsonl files can be uploaded" {
		t.Errorf(".txt file: #error says %q", got)
	}
	for _, r := range p.sent()[sentBefore:] {
		if r.method == http.MethodPost {
			t.Errorf("a .txt file made a request: %s %s", r.method, r.url)
		}
	}
}

// postMultipart uploads a file with the API directly, for the API's own
// answer to compare with the page's.
func postMultipart(t *testing.T, rt *localrun.Runtime, key, name string, data []byte) (int, []byte) {
	t.Helper()
	var body bytes.Buffer
	fmt.Fprintf(&body, "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"+
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=%q\r\nContent-Type: application/octet-stream\r\n\r\n%s\r\n--b--\r\n", name, data)
	req, _ := http.NewRequest(http.MethodPost, rt.URL+"/v1/files", &body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, out.Bytes()
}

func errorMessage(t *testing.T, status int, body []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if status/100 != 4 || json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		t.Fatalf("want an API error, got %d %s", status, body)
	}
	return e.Error.Message
}

// testBrowserNarrowAndKeyboard: on a 360 px screen nothing scrolls sideways;
// the key form and the upload form work with the keyboard alone.
func testBrowserNarrowAndKeyboard(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	name := "a-rather-long-file-name-that-must-wrap-on-a-narrow-screen-without-scrolling.jsonl"
	path := writeFile(t, t.TempDir(), name, jsonlRows(nRows(3, "hello")))

	p := openPanel(t, browserCtx, rt, key, 360, 740, true)
	p.waitVisible("the key form", "#key")
	p.noHorizontalScroll("key form")

	// tabTo presses Tab until the element with id has focus and returns
	// the ids (or tag names) focused on the way.
	tabTo := func(id string, max int) []string {
		t.Helper()
		var path []string
		for range max {
			p.do("press Tab", chromedp.KeyEvent(kb.Tab))
			f := eval[string](p, `document.activeElement?.id || document.activeElement?.tagName || ''`)
			path = append(path, f)
			if f == id {
				return path
			}
		}
		t.Fatalf("#%s not reached with %d Tabs (focus went %v)\n%s", id, max, path, p.state())
		return nil
	}
	focused := func() string { return eval[string](p, `document.activeElement?.id || ''`) }

	tabTo("key", 8)
	p.do("type the key", chromedp.KeyEvent(key))
	tabTo("remember", 2)
	p.do("tick remember", chromedp.KeyEvent(" "))
	tabTo("key-save", 2)
	p.do("press Enter", chromedp.KeyEvent(kb.Enter))
	p.waitVisible("the list after a keyboard sign-in", "#list-view")
	if !eval[bool](p, `document.querySelector('#remember').checked`) {
		t.Errorf("Space did not tick #remember")
	}
	p.noHorizontalScroll("batches list (empty)")

	// The upload form in order; the file chooser is the OS's, so the test
	// sets the files, then submits with Enter on the focused button.
	p.do("choose a file", chromedp.SetUploadFiles(chromedp.ID("files"), []string{path}))
	via := tabTo("files", 12)
	for _, id := range []string{"model", "endpoint", "priority", "webhook", "upload"} {
		p.do("press Tab", chromedp.KeyEvent(kb.Tab))
		if f := focused(); f != id {
			t.Fatalf("after the file input (reached via %v), Tab went to %q, want #%s", via, f, id)
		}
	}
	p.do("press Enter on Upload", chromedp.KeyEvent(kb.Enter))
	id := p.uploadedBatch(name)
	p.waitRow(id, "completed", 30*time.Second)
	p.noHorizontalScroll("batches list with an upload")
	// On a narrow screen each batch is a card that fits: its region must not
	// need scrolling sideways either (an id cut off at the card's edge).
	if w := eval[[]float64](p, `(s => [s.scrollWidth, s.clientWidth])(document.querySelector('#batches').closest('.scroll'))`); w[0] > w[1] {
		t.Errorf("the batch cards are %vpx wide in a %vpx region: they do not fit a 360px screen", w[0], w[1])
	}
	p.screenshot("batch-list-narrow", true)

	// The batch page: open it with the keyboard too (focus the link, Enter).
	p.do("focus the batch link", chromedp.Focus(chromedp.CSS(rowSel(id)+" a")), chromedp.KeyEvent(kb.Enter))
	p.wait("the batch page", 20*time.Second, `document.querySelector('#batch')?.dataset.status === 'completed'`)
	p.waitVisible("the download button", "#download-results")
	p.noHorizontalScroll("batch page")
	checkInvariant(t, c, waitBatch(t, c, id), idsOf(nRows(3, "hello")))
}

// testBrowserLateAnswer: the answer to an older list request that arrives
// after a newer one must not put a batch's status back. The test holds the
// list request made after the upload for 3 s and clicks Refresh meanwhile.
func testBrowserLateAnswer(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	_, key := client(t, rt, "acme")
	path := writeFile(t, t.TempDir(), "slow.jsonl", jsonlRows(nRows(32, "[[mock:sleep=1s]] slow")))
	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	p.watchStatuses()
	released := p.holdNextAnswer("*/v1/batches?limit=100*", 3*time.Second)
	p.upload(path)
	id := p.uploadedBatch("slow.jsonl")
	time.Sleep(time.Second)
	p.do("refresh the list", chromedp.Click(chromedp.ID("refresh")))
	select {
	case <-released:
	case <-time.After(20 * time.Second):
		t.Fatalf("no list request was held\n%s", p.state())
	}
	p.waitRow(id, "in_progress", 20*time.Second)
	time.Sleep(500 * time.Millisecond) // the answers after the held one
	l := p.statuses()[id]
	t.Logf("statuses the list showed: %v", l)
	for i := 1; i < len(l); i++ {
		if slices.Index(lifecycle, l[i]) <= slices.Index(lifecycle, l[i-1]) {
			t.Fatalf("the list showed batch %s as %v: a late answer put its status back", id, l)
		}
	}
}

// holdNextAnswer delays the response of the next request matching pattern
// by d (the server answered; the page gets it late); it lets every other
// request through. The returned channel closes when the held one goes on.
func (p *tab) holdNextAnswer(pattern string, d time.Duration) <-chan struct{} {
	p.t.Helper()
	paused := chromedp.Events(p.ctx, fetch.RequestPaused)
	_, err := chromedp.Call(p.ctx, fetch.Enable, fetch.EnableParams{
		Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: fetch.RequestStageResponse}},
	})
	if err != nil {
		p.t.Fatalf("intercept %s: %v", pattern, err)
	}
	released := make(chan struct{})
	go func() {
		held := false
		for ev, err := range paused {
			if err != nil {
				return
			}
			next := fetch.ContinueResponseParams{RequestID: ev.RequestID}
			if held {
				chromedp.Call(p.ctx, fetch.ContinueResponse, next)
				continue
			}
			held = true
			go func() {
				time.Sleep(d)
				chromedp.Call(p.ctx, fetch.ContinueResponse, next)
				close(released)
			}()
		}
	}()
	return released
}

// testBrowserModelPicker: the model field offers exactly the configured
// models (GET /v1/models), the first one chosen.
func testBrowserModelPicker(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	_, key := client(t, rt, "acme")
	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	want := rt.App.Models.Names()
	got := eval[[]string](p, `[...document.querySelectorAll('#models option')].map((o) => o.value)`)
	if !slices.Equal(got, want) {
		t.Errorf("model suggestions %q, want the configured models %q", got, want)
	}
	if v := eval[string](p, `document.querySelector('#model').value`); v != want[0] {
		t.Errorf("model field %q, want the first configured model %q", v, want[0])
	}
}

// testBrowserUsageChart: with a tenant budget in tokens and USD and a small
// batch run, the usage page (#/usage, linked from the header) shows the
// budget, used and remaining figures GET /v1/usage gives, and a chart whose
// bar for the model on today's date carries the tokens the API reports;
// the chart has a table of the same figures and fits a narrow screen. The
// page's per-key and per-batch views are GET /v1/usage's group_by=key_id
// and key_id,batch_id rows with their cost; a batch's link there opens its
// page, which shows its cost and its rows, and a row's custom_id opens the
// row drawer with its generation (GET /v1/batches/{id}/rows).
func testBrowserUsageChart(t *testing.T, browserCtx context.Context) {
	// gpt-4o-mini gets a price, so the budget counts USD too: a "hello N"
	// row is 3 input and 3 output tokens at the mock, $1.20 at this price.
	rt := runtime(t, func(o *localrun.Options) {
		yaml := strings.Replace(replaceMock(testModels, o.MockAddr), "fallback: gpt-4o-mini-backup,",
			"fallback: gpt-4o-mini-backup, price: {input_per_mtok: 100000, output_per_mtok: 300000},", 1)
		m, err := config.ParseModels([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		o.Models = m
	})
	c, key := client(t, rt, "acme")
	ctx := context.Background()
	if err := rt.App.Store.PutBudget(ctx, "acme", store.Budget{MonthlyTokens: 1000, MonthlyUSD: 50}); err != nil {
		t.Fatal(err)
	}
	rows := nRows(5, "hello")
	b := waitBatch(t, c, createBatch(t, c, upload(t, c, "usage.jsonl", jsonlRows(rows)).ID).ID)
	checkInvariant(t, c, b, idsOf(rows))

	// What the API says for this month (the page asks the same).
	now := time.Now().UTC()
	monthStart := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	status, body := rawDo(t, rt, key, "GET", fmt.Sprintf("/v1/usage?source=batch&start_time=%d", monthStart.Unix()), nil)
	var usage struct {
		Data   []store.UsageRow `json:"data"`
		Budget *govern.View     `json:"budget"`
	}
	if err := json.Unmarshal(body, &usage); status != 200 || err != nil || usage.Budget == nil || len(usage.Data) == 0 {
		t.Fatalf("GET /v1/usage: %d %s (%v); want data and a budget", status, body, err)
	}
	v := usage.Budget
	if v.UsedTokens != 30 || v.MonthlyUSD == nil || *v.MonthlyUSD != 50 {
		t.Fatalf("GET /v1/usage budget %s: want 30 tokens used of 1000, $50 a month", body)
	}
	today := now.Format("2006-01-02")
	var apiToday int64
	for _, r := range usage.Data {
		if r.Day == today && r.Model == "gpt-4o-mini" {
			apiToday = r.TotalTokens
		}
	}
	if apiToday == 0 {
		t.Fatalf("GET /v1/usage has no gpt-4o-mini tokens for %s: %s", today, body)
	}

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	p.do("open the usage page", chromedp.Click(chromedp.CSS(`#nav a[href="#/usage"]`)))
	p.waitVisible("the usage chart", "#usage-chart .bar")

	// Every bar is a day and model of the API's answer, with its tokens.
	type bar struct {
		Date, Model, Tokens, Title string
	}
	bars := eval[[]bar](p, `[...document.querySelectorAll('#usage-chart .bar')].map((r) => ({
		Date: r.dataset.date, Model: r.dataset.model, Tokens: r.dataset.tokens, Title: r.querySelector('title')?.textContent || '' }))`)
	want := map[string]string{}
	for _, r := range usage.Data {
		want[r.Day+" "+r.Model] = fmt.Sprint(r.TotalTokens)
	}
	got := map[string]string{}
	for _, b := range bars {
		got[b.Date+" "+b.Model] = b.Tokens
		if !strings.Contains(b.Title, b.Model) || !strings.Contains(b.Title, b.Date) {
			t.Errorf("bar %+v: its title does not say its date and model", b)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("chart bars (day model → tokens) %v, want GET /v1/usage's %v", got, want)
	}
	if got[today+" gpt-4o-mini"] != fmt.Sprint(apiToday) {
		t.Errorf("today's gpt-4o-mini bar has %q tokens, want %d", got[today+" gpt-4o-mini"], apiToday)
	}
	if h := eval[float64](p, fmt.Sprintf(`+document.querySelector('#usage-chart .bar[data-date=%s][data-model="gpt-4o-mini"]').getAttribute('height')`, js(today))); h <= 0 {
		t.Errorf("today's bar is %v high, want it drawn", h)
	}

	// The budget figures are the API's.
	figures := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#usage-budget [data-field]')].map((d) => [d.dataset.field, d.dataset.value]))`)
	num := func(f string) float64 {
		var x float64
		if _, err := fmt.Sscan(figures[f], &x); err != nil {
			t.Errorf("budget figure %s: %q is not a number (figures %v)", f, figures[f], figures)
		}
		return x
	}
	for f, w := range map[string]float64{
		"monthly_tokens": float64(*v.MonthlyTokens), "used_tokens": float64(v.UsedTokens), "remaining_tokens": float64(*v.RemainingTokens),
		"monthly_usd": *v.MonthlyUSD, "used_usd": v.UsedUSD, "remaining_usd": *v.RemainingUSD,
	} {
		if g := num(f); g != w {
			t.Errorf("budget figure %s on the page: %v, want the API's %v", f, g, w)
		}
	}
	// The budget in the chart: the meter's remaining part and the daily
	// share of the month's tokens.
	if r := eval[string](p, `document.querySelector('#budget-meter .remaining')?.dataset.tokens || ''`); r != fmt.Sprint(*v.RemainingTokens) {
		t.Errorf("the budget meter's remaining part says %q tokens, want %d", r, *v.RemainingTokens)
	}
	days := time.Date(now.Year(), now.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
	if a := eval[string](p, `document.querySelector('#usage-chart .allowance')?.dataset.tokens || ''`); a != fmt.Sprint(*v.MonthlyTokens/int64(days)) {
		t.Errorf("the chart's daily budget line is at %q tokens, want %d (%d tokens over %d days)", a, *v.MonthlyTokens/int64(days), *v.MonthlyTokens, days)
	}
	// Accessible: the chart is a labelled image with a table of its figures.
	if l := eval[string](p, `document.querySelector('#usage-chart').getAttribute('aria-label') || ''`); l == "" || eval[string](p, `document.querySelector('#usage-chart').getAttribute('role')`) != "img" {
		t.Errorf("the chart is not a labelled image (aria-label %q)", l)
	}
	cells := eval[[][]string](p, `[...document.querySelectorAll('[aria-label="Tokens per day and model"] tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
	if len(cells) != len(usage.Data) {
		t.Errorf("the usage table has %d rows %q, want one per API row (%d)", len(cells), cells, len(usage.Data))
	}
	// Per key and per batch: the batch's key and the batch, 30 tokens at
	// $1.20 a row.
	var view struct {
		SubmittedBy string `json:"submitted_by"`
	}
	json.Unmarshal(rawGet(t, rt, key, "/v1/batches/"+b.ID), &view)
	perKey := eval[[][]string](p, `[...document.querySelectorAll('[aria-label="Usage by key"] tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
	if want := [][]string{{view.SubmittedBy, "5", "15", "15", "30", "$6.00"}}; fmt.Sprint(perKey) != fmt.Sprint(want) {
		t.Errorf("usage by key %q, want %q", perKey, want)
	}
	perBatch := eval[[][]string](p, `[...document.querySelectorAll('[aria-label="Usage by batch"] tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
	if want := [][]string{{b.ID, view.SubmittedBy, "5", "15", "15", "30", "$6.00"}}; fmt.Sprint(perBatch) != fmt.Sprint(want) {
		t.Errorf("usage by batch %q, want %q", perBatch, want)
	}
	p.screenshot("usage", true)

	// A narrow screen: redrawn to fit, nothing scrolls sideways.
	p.do("narrow the viewport", chromedp.EmulateViewport(360, 740, chromedp.EmulateMobile, chromedp.EmulateTouch))
	p.wait("the chart to fit 360px", 10*time.Second, `document.querySelector('#usage-chart')?.getBoundingClientRect().width <= 360`)
	p.waitVisible("the usage chart on a narrow screen", "#usage-chart .bar")
	p.noHorizontalScroll("usage page")
	p.screenshot("usage-narrow", true)

	// The batch's page from its usage, and a row's generation in the drawer.
	p.do("widen the viewport", chromedp.EmulateViewport(1280, 800))
	p.do("open the batch from its usage", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[aria-label="Usage by batch"] a[href="#/batches/%s"]`, b.ID))))
	p.waitVisible("the batch's rows", `[aria-label="Rows"] button[data-custom-id="r0002"]`)
	if got := eval[string](p, `[...document.querySelectorAll('#batch dt')].find((d) => d.textContent === 'Cost')?.nextElementSibling.textContent || ''`); got != "$6.00" {
		t.Errorf("the batch page's cost %q, want $6.00", got)
	}
	if n := eval[int](p, `document.querySelectorAll('[aria-label="Rows"] tbody tr').length`); n != len(rows) {
		t.Errorf("the batch page lists %d rows, want %d", n, len(rows))
	}
	p.do("open row r0002", chromedp.Click(chromedp.CSS(`[aria-label="Rows"] button[data-custom-id="r0002"]`)))
	p.waitVisible("the row drawer", "#row-drawer #row-generation")
	gen := eval[map[string]string](p, `Object.fromEntries([...document.querySelectorAll('#row-generation dt')].map((d) => [d.textContent, d.nextElementSibling.textContent]))`)
	for k, want := range map[string]string{"Status": "completed", "Model": "gpt-4o-mini", "Fallback used": "no", "Attempts": "1",
		"Last upstream status": "200", "Input tokens": "3", "Output tokens": "3", "Total tokens": "6", "Submitted by key": view.SubmittedBy, "Row": "2"} {
		if gen[k] != want {
			t.Errorf("row drawer %s = %q, want %q (all: %v)", k, gen[k], want, gen)
		}
	}
	if !eval[bool](p, `document.querySelector('#row-drawer').open && document.activeElement?.id === 'row-drawer-close'`) {
		t.Error("the row drawer is not open with focus on its Close button")
	}
	p.screenshot("row-drawer", false)
	p.do("close the drawer with Escape", chromedp.KeyEvent(kb.Escape))
	p.wait("the drawer to close, focus back on its row", 10*time.Second,
		`!document.querySelector('#row-drawer') && document.activeElement?.dataset.customId === 'r0002'`)
}

// testBrowserProgressChart: a running batch's page draws its progress over
// time, as the page polled it, and the ETA band: from its last point to
// the spread of the batch's recent estimated_completion_at readings
// (docs/api.md "Extensions"; README, "Progress").
func testBrowserProgressChart(t *testing.T, browserCtx context.Context) {
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	rows := nRows(96, "[[mock:sleep=1s]] slow") // 12 s at the model's concurrency of 8
	b := createBatch(t, c, upload(t, c, "slow.jsonl", jsonlRows(rows)).ID)

	p := openPanel(t, browserCtx, rt, key, 1280, 800, false)
	p.signIn()
	p.do("open batch "+b.ID, chromedp.Navigate(rt.URL+"/#/batches/"+b.ID))
	p.waitVisible("the ETA band of the running batch", "#progress-chart .eta-band")
	type band struct {
		From, To, Points int64
		Label            string
	}
	got := eval[band](p, `(() => { const c = document.querySelector('#progress-chart'), e = c.querySelector('.eta-band');
		return { From: +e.dataset.from, To: +e.dataset.to, Points: +c.querySelector('.done').dataset.points, Label: c.getAttribute('aria-label') }; })()`)
	if got.Points < 2 || got.From < b.CreatedAt || got.To < got.From || got.To > b.ExpiresAt || !strings.Contains(got.Label, "ends between") {
		t.Fatalf("progress chart %+v: want 2 points or more and an ETA band after the batch's creation at %d", got, b.CreatedAt)
	}
	if b := waitBatch(t, c, b.ID); b.Status != "completed" {
		t.Fatalf("batch %s: %s", b.ID, b.Status)
	}
}
