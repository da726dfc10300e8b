package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// exitBatchUnsuccessful is the exit code of batch submit --wait and batch
// wait when a batch ended failed, expired or cancelled, or with failed rows,
// and of batch results when the batch failed (so it has no results).
const exitBatchUnsuccessful = 3

// apiBatch is the API's Batch object as openai-go reads it, with Relay's
// extension fields (docs/api.md "Extensions").
type apiBatch struct{ openai.Batch }

// priority, retryOf and deadLetters are Relay's extension fields.
func (b apiBatch) priority() (n int) {
	extra(b.JSON.ExtraFields, "priority", &n)
	return n
}

func (b apiBatch) retryOf() (id string) {
	extra(b.JSON.ExtraFields, "retry_of", &id)
	return id
}

func (b apiBatch) deadLetters() (n int) {
	extra(b.JSON.ExtraFields, "dead_letter_count", &n)
	return n
}

// cost is the batch's cost in USD, as the API prints it (docs/api.md
// "Extensions"): "" when it has none (a model without a price).
func (b apiBatch) cost() string {
	var c *float64
	extra(b.JSON.ExtraFields, "cost", &c)
	if c == nil {
		return ""
	}
	return "$" + strconv.FormatFloat(math.Round(*c*1e6)/1e6, 'f', -1, 64)
}

func (b apiBatch) terminal() bool {
	switch b.Status {
	case "completed", "failed", "expired", "cancelled":
		return true
	}
	return false
}

func (b apiBatch) done() int { return int(b.RequestCounts.Completed + b.RequestCounts.Failed) }

func (b apiBatch) progress(rate float64) progress {
	p := progress{
		Label: b.ID, Status: string(b.Status), Done: b.done(), Total: int(b.RequestCounts.Total),
		Failed: int(b.RequestCounts.Failed), Rate: rate,
	}
	var at int64
	extra(b.JSON.ExtraFields, "estimated_completion_at", &at)
	if at > 0 {
		p.EndsAt = time.Unix(at, 0)
	}
	return p
}

func (b apiBatch) endedAt() int64 {
	return max(b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt)
}

// firstError describes the first validation error of a failed batch.
func (b apiBatch) firstError() string {
	if len(b.Errors.Data) == 0 {
		return "no error details"
	}
	e := b.Errors.Data[0]
	s := e.Message
	if e.Line > 0 && !strings.HasPrefix(s, "line ") {
		s = fmt.Sprintf("line %d: %s", e.Line, s)
	}
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if n := len(b.Errors.Data) - 1; n > 0 {
		s += fmt.Sprintf(", and %d more: relay batch status %s --json", n, b.ID)
	}
	return s
}

// printBatchErrors lists the errors of a failed batch, one a line.
func printBatchErrors(w io.Writer, b apiBatch) {
	if len(b.Errors.Data) == 0 {
		fmt.Fprintf(w, "batch %s failed without error details (relay batch status %s --json shows the batch)\n", b.ID, b.ID)
		return
	}
	errs := fmt.Sprintf("%d errors", len(b.Errors.Data))
	if len(b.Errors.Data) == 1 {
		errs = "1 error"
	}
	fmt.Fprintf(w, "batch %s failed with %s:\n", b.ID, errs)
	for _, e := range b.Errors.Data {
		var parts []string
		msg := e.Message
		if e.Line > 0 {
			parts = append(parts, fmt.Sprintf("line %d", e.Line))
			msg = strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", e.Line))
		}
		if e.Code != "" {
			parts = append(parts, e.Code)
		}
		parts = append(parts, msg)
		fmt.Fprintf(w, "  %s\n", strings.Join(parts, ": "))
	}
}

// outcome says how an ended batch went and whether it fully succeeded.
func outcome(b apiBatch) (string, bool) {
	n := b.RequestCounts
	switch b.Status {
	case "completed":
		if n.Failed == 0 {
			return fmt.Sprintf("%s completed: %d rows", b.ID, n.Total), true
		}
		return fmt.Sprintf("%s completed with %d of %d rows failed: `relay batch results %s` shows them, `relay batch retry %s` runs them again",
			b.ID, n.Failed, n.Total, b.ID, b.ID), false
	case "failed":
		return fmt.Sprintf("%s failed: %s", b.ID, b.firstError()), false
	case "expired":
		return fmt.Sprintf("%s expired: %d of %d rows did not complete within %s; `relay batch retry %s` runs them again",
			b.ID, n.Total-n.Completed, n.Total, b.CompletionWindow, b.ID), false
	case "cancelled":
		return fmt.Sprintf("%s was cancelled with %d of %d rows completed; `relay batch retry %s` runs the rest",
			b.ID, n.Completed, n.Total, b.ID), false
	}
	return fmt.Sprintf("%s is %s", b.ID, b.Status), false
}

// verdict is the exit status of waiting for batches: nil when every one
// completed without failed rows, exit code 3 naming the others.
func verdict(bs []apiBatch) error {
	var bad []string
	for _, b := range bs {
		if line, ok := outcome(b); !ok {
			bad = append(bad, line)
		}
	}
	switch len(bad) {
	case 0:
		return nil
	case 1:
		return exitError{exitBatchUnsuccessful, errors.New(bad[0])}
	}
	return exitError{exitBatchUnsuccessful, fmt.Errorf("%d of %d batches did not fully succeed:\n  %s", len(bad), len(bs), strings.Join(bad, "\n  "))}
}

func batchHint(err error) error {
	return withHint(err, http.StatusNotFound, "check the id: `relay batch list` shows your batches")
}

// batchCommands are the commands of relay batch.
var batchCommands = []string{"submit", "quote", "status", "list", "cancel", "retry", "results", "wait", "rows"}

func runBatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return newCLI(stdout, stderr).batch(ctx, args)
}

func (c *cli) batch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageErr("batch: want %s", oneOf(batchCommands))
	}
	var err error
	switch args[0] {
	case "submit":
		err = c.batchSubmit(ctx, args[1:])
	case "quote":
		err = c.batchQuote(ctx, args[1:])
	case "status", "cancel", "retry":
		err = c.batchOne(ctx, args[0], args[1:])
	case "list":
		err = c.batchList(ctx, args[1:])
	case "results":
		err = c.batchResults(ctx, args[1:])
	case "wait":
		err = c.batchWait(ctx, args[1:])
	case "rows":
		err = c.batchRows(ctx, args[1:])
	default:
		return usageErr("batch: unknown command %q: want %s", args[0], oneOf(batchCommands))
	}
	return helpIsSuccess(err)
}

// metadataFlag collects repeated --metadata k=v.
type metadataFlag map[string]string

func (m metadataFlag) String() string { return "" }

func (m metadataFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	m[k] = val
	return nil
}

func (c *cli) batchSubmit(ctx context.Context, args []string) error {
	fs := newFlagSet("batch submit", "FILE... [flags]")
	var cf connFlags
	cf.register(fs)
	var endpoint, window, model, webhookURL string
	var priority int
	metadata := metadataFlag{}
	fs.StringVar(&model, "model", "", "the model of every row: sets (overrides) body.model of every JSONL row; required for CSV files")
	fs.StringVar(&endpoint, "endpoint", "/v1/chat/completions", "the endpoint of every row")
	fs.IntVar(&priority, "priority", 0, "higher priority batches run first")
	fs.StringVar(&webhookURL, "webhook-url", "", "URL that gets a POST when the batch ends")
	fs.Var(metadata, "metadata", "key=value to attach to the batch (repeatable)")
	fs.StringVar(&window, "completion-window", "24h", "how long the batch may run, 1h to 24h")
	wait := fs.Bool("wait", false, "wait until every batch ends, showing progress on stderr")
	asJSON := fs.Bool("json", false, "print the API's Batch JSON (the final one with --wait)")
	paths, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return usageErr("batch submit: give at least one FILE (.jsonl or .csv)")
	}
	for _, p := range paths {
		if strings.EqualFold(filepath.Ext(p), ".csv") && model == "" {
			return usageErr("batch submit: %s is CSV: pass --model M, the model every row uses", p)
		}
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}

	params := openai.BatchNewParams{Endpoint: openai.BatchNewParamsEndpoint(endpoint), CompletionWindow: openai.BatchNewParamsCompletionWindow(window)}
	if len(metadata) > 0 {
		params.Metadata = shared.Metadata(metadata)
	}
	// Relay's extensions of the create (docs/api.md "Extensions").
	ext := map[string]any{}
	for k, v := range map[string]any{"priority": priority, "webhook_url": webhookURL, "model": model} {
		if v != 0 && v != "" {
			ext[k] = v
		}
	}
	params.SetExtraFields(ext)
	var ids []string
	for _, p := range paths {
		f, err := c.uploadInput(ctx, cl, p, model)
		if err != nil {
			return err
		}
		params.InputFileID = f.ID
		b, err := cl.oai.Batches.New(ctx, params)
		if err != nil {
			return fmt.Errorf("create a batch of %s (file %s): %w", p, f.ID, err)
		}
		ids = append(ids, b.ID)
		switch {
		case *asJSON && !*wait:
			printJSON(c.stdout, b.RawJSON())
		case !*asJSON:
			fmt.Fprintln(c.stdout, b.ID)
		}
	}
	if !*wait {
		return nil
	}
	return c.waitAndJudge(ctx, cl, ids, *asJSON)
}

// uploadInput uploads the input file at path as batch submit sends it:
// with model set on every row (prepareInput).
func (c *cli) uploadInput(ctx context.Context, cl *apiClient, path, model string) (*openai.FileObject, error) {
	up, cleanup, err := prepareInput(path, model)
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", path, err)
	}
	defer cleanup()
	f, err := cl.upload(ctx, up)
	if err != nil {
		return nil, fmt.Errorf("upload %s: %w", path, err)
	}
	return f, nil
}

// batchWait waits for batches submitted earlier, as submit --wait does.
func (c *cli) batchWait(ctx context.Context, args []string) error {
	fs := newFlagSet("batch wait", "ID... [--json]")
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the API's final Batch JSON")
	ids, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usageErr("batch wait: give at least one batch ID")
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	return c.waitAndJudge(ctx, cl, ids, *asJSON)
}

// waitAndJudge waits for the batches, prints their final JSON when asked,
// and returns the exit status their outcome deserves.
func (c *cli) waitAndJudge(ctx context.Context, cl *apiClient, ids []string, asJSON bool) error {
	final, raws, err := c.waitBatches(ctx, cl, ids)
	if err != nil {
		return err
	}
	if asJSON {
		for _, raw := range raws {
			printJSON(c.stdout, raw)
		}
	}
	return verdict(final)
}

// maxPollFailures is how many polls in a row may fail transiently (the
// server restarting, a 502) before waiting gives up: about a minute.
const maxPollFailures = 12

// waitBatches polls the batches until every one has ended, reporting
// progress on stderr, and returns their final states and JSON.
func (c *cli) waitBatches(ctx context.Context, cl *apiClient, ids []string) ([]apiBatch, []string, error) {
	bs := make([]apiBatch, len(ids))
	raws := make([]string, len(ids))
	for i, id := range ids {
		bs[i].ID = id
	}
	rep := newProgressReporter(c.stderr, c.tty, c.now)
	defer rep.clear()
	interval, failures := c.pollMin, 0
	for {
		running := 0
		for i := range bs {
			if bs[i].terminal() {
				continue
			}
			got, err := cl.oai.Batches.Get(ctx, ids[i])
			switch {
			case ctx.Err() != nil:
				return nil, nil, stoppedWaiting(ids)
			case err != nil && transient(err) && failures < maxPollFailures:
				failures++
				rep.println(fmt.Sprintf("get batch %s: %v (trying again)", ids[i], err))
				running++
				continue
			case err != nil:
				return nil, nil, fmt.Errorf("get batch %s: %w", ids[i], batchHint(err))
			}
			failures = 0
			bs[i], raws[i] = apiBatch{*got}, got.RawJSON()
			if !bs[i].terminal() {
				running++
			}
		}
		rep.update(bs)
		if running == 0 {
			return bs, raws, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, stoppedWaiting(ids)
		case <-time.After(interval):
		}
		interval = min(interval*3/2, c.pollMax)
	}
}

func stoppedWaiting(ids []string) error {
	return fmt.Errorf("stopped waiting; the batches go on: relay batch wait %s", strings.Join(ids, " "))
}

// batchOne runs status, cancel and retry, which take one batch id.
func (c *cli) batchOne(ctx context.Context, sub string, args []string) error {
	fs := newFlagSet("batch "+sub, "ID [--json]")
	var cf connFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the API's Batch JSON")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("batch %s: give one batch ID (relay batch list shows them)", sub)
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	var got *openai.Batch
	what := "get batch"
	switch sub {
	case "status":
		got, err = cl.oai.Batches.Get(ctx, pos[0])
	case "cancel":
		what = "cancel batch"
		got, err = cl.oai.Batches.Cancel(ctx, pos[0])
	case "retry":
		// POST /v1/batches/{id}/retry is Relay's (docs/api.md "Extensions").
		what = "retry the failed rows of batch"
		err = cl.oai.Post(ctx, "batches/"+url.PathEscape(pos[0])+"/retry", nil, &got)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, pos[0], batchHint(err))
	}
	b := apiBatch{*got}
	switch {
	case *asJSON:
		return printJSON(c.stdout, b.RawJSON())
	case sub == "status":
		return printBatch(c.stdout, b)
	case sub == "cancel":
		fmt.Fprintln(c.stdout, b.ID, b.Status)
	default:
		fmt.Fprintln(c.stdout, b.ID)
	}
	return nil
}

func printBatch(w io.Writer, b apiBatch) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	n := b.RequestCounts
	row("id", b.ID)
	row("status", string(b.Status))
	row("rows", fmt.Sprintf("%d/%d done, %d failed", b.done(), n.Total, n.Failed))
	row("endpoint", b.Endpoint)
	row("model", b.Model)
	if p := b.priority(); p != 0 {
		row("priority", strconv.Itoa(p))
	}
	row("input file", b.InputFileID)
	row("output file", b.OutputFileID)
	row("error file", b.ErrorFileID)
	row("retry of", b.retryOf())
	if n := b.deadLetters(); n > 0 {
		row("dead letters", strconv.Itoa(n))
	}
	row("cost", b.cost())
	row("created", unixTime(b.CreatedAt))
	row("ended", unixTime(b.endedAt()))
	if b.Status == "failed" {
		row("error", b.firstError())
	}
	return tw.Flush()
}

func (c *cli) batchList(ctx context.Context, args []string) error {
	fs := newFlagSet("batch list", "[--limit N] [--after ID] [--json]")
	var cf connFlags
	cf.register(fs)
	limit := fs.Int("limit", 0, "how many batches, 1 to 100 (default 20)")
	after := fs.String("after", "", "list the batches after this id (the last of the previous page)")
	asJSON := fs.Bool("json", false, "print the API's list JSON")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("batch list takes no arguments (flags: --limit N --after ID --json)")
	}
	if *limit < 0 {
		return usageErr("batch list: --limit must be positive")
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	q := openai.BatchListParams{}
	if *limit > 0 {
		q.Limit = openai.Int(int64(*limit))
	}
	if *after != "" {
		q.After = openai.String(*after)
	}
	l, err := cl.oai.Batches.List(ctx, q)
	if err != nil {
		return fmt.Errorf("list batches: %w", err)
	}
	if *asJSON {
		return printJSON(c.stdout, l.RawJSON())
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tROWS\tFAILED\tCOST\tMODEL\tCREATED")
	for _, ob := range l.Data {
		b := apiBatch{ob}
		rows := fmt.Sprintf("%d/%d", b.done(), b.RequestCounts.Total)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", b.ID, b.Status, rows, b.RequestCounts.Failed, cmp.Or(b.cost(), "-"), b.Model, unixTime(b.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.HasMore && len(l.Data) > 0 {
		fmt.Fprintf(c.stderr, "more: relay batch list --after %s\n", l.Data[len(l.Data)-1].ID)
	}
	return nil
}

func (c *cli) batchResults(ctx context.Context, args []string) error {
	fs := newFlagSet("batch results", "ID [-o FILE] [--partial]\n"+
		"prints a batch's result lines (output and error rows) in input order.\n"+
		"A batch that failed (its input did not pass validation) has none: its errors go to stderr\n"+
		"(line, code, message) and the exit code is 3, as for a failed batch with --wait.")
	var cf connFlags
	cf.register(fs)
	out := fs.String("o", "", "write the results to FILE instead of stdout")
	partial := fs.Bool("partial", false, "get the rows finished so far of a batch still running")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("batch results: give one batch ID (relay batch list shows them)")
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	id := pos[0]
	// A failed batch answers /results with nothing at all: its errors are
	// in the Batch object.
	got, err := cl.oai.Batches.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("get batch %s: %w", id, batchHint(err))
	}
	b := apiBatch{*got}
	if b.Status == "failed" {
		printBatchErrors(c.stderr, b)
		return exitError{exitBatchUnsuccessful, fmt.Errorf("batch %s failed, so it has no results: fix the input and submit it again", id)}
	}
	// GET /v1/batches/{id}/results is Relay's (docs/api.md "Extensions"),
	// streamed as it comes.
	var opts []option.RequestOption
	if *partial {
		opts = append(opts, option.WithQuery("partial", "true"))
	}
	var resp *http.Response
	err = cl.oai.Get(ctx, "batches/"+url.PathEscape(id)+"/results", nil, &resp, opts...)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		status := cmp.Or(string(b.Status), "running")
		return fmt.Errorf("batch %s is still %s: wait for it or pass --partial", id, status)
	}
	if err != nil {
		return fmt.Errorf("get the results of batch %s: %w", id, batchHint(err))
	}
	defer resp.Body.Close()
	return c.save(resp.Body, *out)
}

// batchRows prints the generations of a batch's committed rows (GET
// /v1/batches/{id}/rows, docs/api.md "Rows"): all pages, a row a line, or
// their JSON.
func (c *cli) batchRows(ctx context.Context, args []string) error {
	fs := newFlagSet("batch rows", "ID [--custom-id ID] [--failed] [--json]")
	var cf connFlags
	cf.register(fs)
	customID := fs.String("custom-id", "", "only the row of this custom_id")
	failed := fs.Bool("failed", false, "only the rows that failed")
	asJSON := fs.Bool("json", false, "print each row's JSON, a line each")
	pos, err := c.parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("batch rows: give one batch ID (relay batch list shows them)")
	}
	cl, err := c.connect(cf)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "ROW\tCUSTOM ID\tSTATUS\tMODEL\tFALLBACK\tATTEMPTS\tLAST STATUS\tTOKENS\tERROR")
	}
	q := url.Values{}
	if *customID != "" {
		q.Set("custom_id", *customID)
	}
	if *failed {
		q.Set("status", "failed")
	}
	for {
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
			LastID  string            `json:"last_id"`
		}
		path := "batches/" + url.PathEscape(pos[0]) + "/rows?" + q.Encode()
		if err := cl.oai.Get(ctx, path, nil, &page); err != nil {
			return fmt.Errorf("rows of batch %s: %w", pos[0], batchHint(err))
		}
		for _, raw := range page.Data {
			if *asJSON {
				fmt.Fprintln(c.stdout, string(raw))
				continue
			}
			var g struct {
				Row        int    `json:"row"`
				CustomID   string `json:"custom_id"`
				Status     string `json:"status"`
				Model      string `json:"model"`
				Fallback   bool   `json:"fallback"`
				Attempts   int    `json:"attempts"`
				LastStatus *int   `json:"last_status"`
				Tokens     int64  `json:"total_tokens"`
				Error      *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			_ = json.Unmarshal(raw, &g)
			last, code := "-", ""
			if g.LastStatus != nil {
				last = strconv.Itoa(*g.LastStatus)
			}
			if g.Error != nil {
				code = g.Error.Code
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%d\t%s\t%d\t%s\n", g.Row, g.CustomID, g.Status, cmp.Or(g.Model, "-"), g.Fallback, g.Attempts, last, g.Tokens, code)
		}
		if !page.HasMore {
			break
		}
		q.Set("after", page.LastID)
	}
	if *asJSON {
		return nil
	}
	return tw.Flush()
}
