package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/sched"
)

// testEngine is e with the parts its test leaves out set to explicit
// stand-ins: the wall clock, nothing governed, nothing done at a batch's
// end, no retry input, every chunk run here (no native model) and no
// workflow records (a record is an error of the test's).
func testEngine(e *Engine) *Engine {
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.Govern == nil {
		e.Govern = ungoverned{}
	}
	if e.Lifecycle == nil {
		e.Lifecycle = lifecycleFunc(nil)
	}
	if e.Workflow == nil {
		e.Workflow = noWorkflows{}
	}
	if e.Native == nil {
		e.Native = noNative{}
	}
	if e.Audit == nil {
		e.Audit = noAudit{}
	}
	return e
}

// noAudit keeps no audit trail.
type noAudit struct{}

func (noAudit) Add(audit.Entry)             {}
func (noAudit) Flush(context.Context) error { return nil }

// ungoverned allows every batch every model.
type ungoverned struct{}

func (ungoverned) Start(context.Context, batch.Batch) (func(string) bool, error) { return nil, nil }
func (ungoverned) Admit(context.Context, batch.Batch, batch.Chunk, ...batch.Chunk) (string, string, error) {
	return "", "", nil
}
func (ungoverned) Allowed(context.Context, batch.Batch) (func(string) bool, error) { return nil, nil }

// lifecycleFunc is a Lifecycle whose Terminal is the func (nil does
// nothing) and that finds no retry input.
type lifecycleFunc func(ctx context.Context, b batch.Batch) error

func (f lifecycleFunc) Terminal(ctx context.Context, b batch.Batch) error {
	if f == nil {
		return nil
	}
	return f(ctx, b)
}

func (lifecycleFunc) Announce(context.Context, batch.Batch, string) error { return nil }

func (lifecycleFunc) Announces(b batch.Batch) bool { return b.WebhookURL != nil }

func (lifecycleFunc) RetryInput(context.Context, batch.Batch) (file.File, error) {
	return file.File{}, file.ErrNotFound
}

// noWorkflows fails a workflow record: the tests that run one give theirs.
type noWorkflows struct{}

func (noWorkflows) Run(_, _ context.Context, b batch.Batch, c batch.Chunk, _ jsonl.Request, _ func() batch.Status) error {
	return errors.New("test engine: no workflow runner for chunk " + c.Batch)
}

func (noWorkflows) ValidRow(batch.Batch, []byte) bool { return true }

func (noWorkflows) Spent(context.Context, batch.Batch, batch.Chunk) (inference.Usage, bool, error) {
	return inference.Usage{}, false, nil
}

// noNative runs every chunk on the executors and has no steps to handle.
type noNative struct{}

func (noNative) Start(_ context.Context, _ batch.Batch, entries []sched.Ready) ([]sched.Ready, error) {
	return entries, nil
}

func (noNative) Handle(_ context.Context, m msg.Message, _ bool) error {
	return errors.New("test engine: no native delegate for " + string(m.Type))
}

// completeDeps is a Deps with every part set.
func completeDeps() Deps {
	return Deps{
		Store: newMemTable(), Blobs: newMemBucket(), Queue: &fakeQueue{}, Provider: &fallbackProvider{},
		Models: &config.Models{}, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Govern: ungoverned{}, Lifecycle: lifecycleFunc(nil),
		Workflow: func(*Engine) Workflow { return noWorkflows{} },
		Native:   func(*Engine) Delegate { return noNative{} },
		Audit:    noAudit{},
	}
}

// New refuses Deps without a required part, naming it, and builds the
// workflow runner and the native delegate on the engine it returns.
func TestNewRefusesAMissingPart(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		part string
		drop func(*Deps)
	}{
		{"Store", func(d *Deps) { d.Store = nil }},
		{"Blobs", func(d *Deps) { d.Blobs = nil }},
		{"Queue", func(d *Deps) { d.Queue = nil }},
		{"Provider", func(d *Deps) { d.Provider = nil }},
		{"Models", func(d *Deps) { d.Models = nil }},
		{"Log", func(d *Deps) { d.Log = nil }},
		{"Now", func(d *Deps) { d.Now = nil }},
		{"Govern", func(d *Deps) { d.Govern = nil }},
		{"Lifecycle", func(d *Deps) { d.Lifecycle = nil }},
		{"Workflow", func(d *Deps) { d.Workflow = nil }},
		{"Native", func(d *Deps) { d.Native = nil }},
		{"Audit", func(d *Deps) { d.Audit = nil }},
		{"Workflow", func(d *Deps) { d.Workflow = func(*Engine) Workflow { return nil } }},
		{"Native", func(d *Deps) { d.Native = func(*Engine) Delegate { return nil } }},
	} {
		t.Run(tt.part, func(t *testing.T) {
			t.Parallel()
			d := completeDeps()
			tt.drop(&d)
			e, err := New(d)
			if err == nil || !strings.Contains(err.Error(), "Deps."+tt.part) {
				t.Fatalf("New without %s: %v, %v; want an error naming it", tt.part, e, err)
			}
		})
	}
}

func TestNewBuildsOnTheEngine(t *testing.T) {
	t.Parallel()
	d := completeDeps()
	var workflowOn, nativeOn *Engine
	d.Workflow = func(e *Engine) Workflow { workflowOn = e; return noWorkflows{} }
	d.Native = func(e *Engine) Delegate { nativeOn = e; return noNative{} }
	e, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	if workflowOn != e || nativeOn != e || e.Workflow == nil || e.Native == nil || e.Govern == nil || e.Lifecycle == nil || e.Now == nil {
		t.Fatalf("New built %+v; Workflow on %p, Native on %p", e, workflowOn, nativeOn)
	}
}
