package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/govern"
	"github.com/relaybatch/relay/internal/inference"
	"github.com/relaybatch/relay/internal/mockup"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/part"
	"github.com/relaybatch/relay/internal/provider"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// fakes holds a batch's records in memory: the Store, Blobs, Queue and
// Engine of a Service.
type fakes struct {
	mu      sync.Mutex
	b       batch.Batch
	input   []byte
	chunks  map[int]batch.Chunk
	groups  map[int]batch.Group
	sent    []msg.Message
	commits map[int][]part.Outcome
	// commitCalls counts CommitRows by chunk; onCommit, if set, runs
	// first (outside the lock); sendErr, if set, fails the next SendBatch.
	commitCalls map[int]int
	onCommit    func(batch.Chunk)
	sendErr     error
	// allowed is the batch's key's allow-list (nil: every model).
	allowed func(string) bool
	// gov, if set, answers Admit as the engine's Governor does; nil
	// admits every chunk.
	gov *govern.Checker
	// discard, if set, makes CommitRows read the part through and keep
	// nothing of it but the chunk's state (heap tests).
	discard bool
	// announced counts AnnounceInProgress.
	announced atomic.Int32
}

func (f *fakes) GetBatch(context.Context, string, string) (batch.Batch, error) { return f.b, nil }
func (f *fakes) UpdateBatch(_ context.Context, _, _ string, fn func(*batch.Batch) error) (batch.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.b
	if err := fn(&b); err != nil {
		return f.b, err
	}
	f.b = b
	return b, nil
}
func (f *fakes) Chunks(context.Context, string) ([]batch.Chunk, error) {
	var cs []batch.Chunk
	for i := range len(f.chunks) {
		cs = append(cs, f.chunks[i])
	}
	return cs, nil
}
func (f *fakes) GetChunk(_ context.Context, _ string, i int) (batch.Chunk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chunks[i], nil
}
func (f *fakes) ClaimAlone(_ context.Context, c batch.Chunk, run string, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chunks[c.Index].State != batch.ChunkPending {
		return store.ErrRaced
	}
	c.State, c.Run = batch.ChunkClaimed, run
	f.chunks[c.Index] = c
	return nil
}
func (f *fakes) Takeover(_ context.Context, c batch.Chunk, run string, _, _ time.Time) (batch.Chunk, error) {
	c.Run = run
	f.chunks[c.Index] = c
	return c, nil
}
func (f *fakes) RenewLease(context.Context, string, int, string, time.Time) error { return nil }
func (f *fakes) PutGroups(_ context.Context, gs []batch.Group) error {
	for _, g := range gs {
		if _, ok := f.groups[g.Index]; !ok {
			f.groups[g.Index] = g
		}
	}
	return nil
}
func (f *fakes) Group(_ context.Context, _ string, i int) (batch.Group, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.groups[i], nil
}
func (f *fakes) UpdateGroup(_ context.Context, _ string, i int, fn func(*batch.Group) error) (batch.Group, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[i]
	g.Chunks = append([]int(nil), g.Chunks...)
	if err := fn(&g); err != nil {
		return f.groups[i], err
	}
	f.groups[i] = g
	return g, nil
}
func (f *fakes) ReadRange(_ context.Context, _ []batch.Object, start, end int64) ([]byte, error) {
	return f.input[start:end], nil
}
func (f *fakes) Send(_ context.Context, _ string, v any, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, v.(msg.Message))
	return nil
}
func (f *fakes) SendBatch(ctx context.Context, name string, vs []any, d time.Duration) error {
	f.mu.Lock()
	err := f.sendErr
	f.sendErr = nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, v := range vs {
		_ = f.Send(ctx, name, v, d)
	}
	return nil
}
func (f *fakes) CommitRows(_ context.Context, b batch.Batch, c batch.Chunk, rows *part.Lines) error {
	if f.onCommit != nil {
		f.onCommit(c)
	}
	if f.discard {
		return f.commitDiscarding(c, rows)
	}
	outs, err := outcomesOf(b, c, rows)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commitCalls[c.Index]++
	c.State = batch.ChunkDone
	f.chunks[c.Index] = c
	f.commits[c.Index] = outs
	return nil
}

// outcomesOf reads rows back as the outcomes their lines say, in row
// order: a line's error code is both its Code and its Result's ErrCode.
func outcomesOf(b batch.Batch, c batch.Chunk, rows *part.Lines) ([]part.Outcome, error) {
	defer rows.Close()
	objs, cm, err := part.Commit(c, rows, 0, time.Now())
	if err != nil {
		return nil, err
	}
	decoders := map[byte]*json.Decoder{part.KindOut: json.NewDecoder(objs["out"].Body), part.KindErr: json.NewDecoder(objs["err"].Body)}
	var outs []part.Outcome
	for _, kind := range []byte(cm.Chunk.Pattern) {
		var l part.Line
		if err := decoders[kind].Decode(&l); err != nil {
			return nil, err
		}
		o := part.Outcome{CustomID: l.CustomID}
		if r := l.Response; r != nil {
			o.Result = inference.Result{StatusCode: r.StatusCode, Body: r.Body, RequestID: r.RequestID, Usage: provider.UsageOf(b.Endpoint, r.Body)}
		}
		if e := l.Error; e != nil {
			o.Code, o.Message, o.Result.ErrCode, o.Result.ErrMessage = e.Code, e.Message, e.Code, e.Message
		}
		outs = append(outs, o)
	}
	return outs, nil
}

func (f *fakes) TakeSlots(_ context.Context, c batch.Chunk) (batch.Chunk, error) {
	c.Slots = 2
	return c, nil
}

func (f *fakes) AnnounceInProgress(context.Context, batch.Batch) { f.announced.Add(1) }

func (f *fakes) Route(_ context.Context, b batch.Batch) (provider.Route, error) {
	return provider.Route{Fallback: b.Fallback(), Allowed: f.allowed}, nil
}

func (f *fakes) Admit(ctx context.Context, b batch.Batch, c batch.Chunk, more ...batch.Chunk) (string, string, error) {
	if f.gov == nil {
		return "", "", nil
	}
	return f.gov.Admit(ctx, b, c, more...)
}

// tenantState is a govern.Store of the batch's key, enabled until
// disabled, and its tenant's budget and spend.
type tenantState struct {
	mu       sync.Mutex
	disabled bool
	budget   store.Budget
	spent    int64
}

func (g *tenantState) KeyByID(_ context.Context, id string) (apikey.Key, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return apikey.Key{ID: id, Tenant: "t", Disabled: g.disabled}, nil
}

func (g *tenantState) GetBudget(context.Context, string) (store.Budget, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.budget, nil
}

func (g *tenantState) Usage(context.Context, string, string, string) ([]store.UsageRow, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return []store.UsageRow{{Model: "nat", TotalTokens: g.spent}}, nil
}

// The steps make no reservations (a create does).
func (g *tenantState) UpdateReservations(context.Context, string, func(*store.Reservations) error) error {
	return errors.New("tenantState: no reservations")
}

func (g *tenantState) BatchUsage(context.Context, string, string, string, []string) ([]store.UsageDetail, error) {
	return nil, nil
}

func (g *tenantState) HoldCost(context.Context, string, string, map[string]float64, func(batch.Batch) (bool, error)) (bool, error) {
	return true, nil
}

func (g *tenantState) GetBatch(context.Context, string, string) (batch.Batch, error) {
	return batch.Batch{}, errors.New("tenantState: no batches")
}

// governed puts f's batch under a real govern.Checker on state, whose
// reads are never cached: a change is seen at the next step.
func governed(f *fakes) *tenantState {
	state := &tenantState{}
	f.b.KeyID = "key1"
	f.gov = &govern.Checker{Store: state, TTL: time.Nanosecond, Now: time.Now}
	return state
}

// refusals are the two ways a tenant's native work is stopped once
// started, and the code each gives the rows (docs/design.md
// "Governance"): refuse applies it.
var refusals = []struct {
	name   string
	refuse func(*tenantState)
	code   string
}{
	{"disabled key", func(g *tenantState) { g.mu.Lock(); g.disabled = true; g.mu.Unlock() }, govern.CodeCredentialRevoked},
	{"spent budget", func(g *tenantState) {
		g.mu.Lock()
		g.budget, g.spent = store.Budget{MonthlyTokens: 100}, 100
		g.mu.Unlock()
	}, govern.CodeBudgetExceeded},
}

type testKey struct{}

func (testKey) Key(context.Context, string) (string, error) { return "sk-test", nil }

// take removes and returns the messages sent so far.
func (f *fakes) take() []msg.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.sent
	f.sent = nil
	return out
}

// newFlow is a Service on fakes and a mock provider, for a batch of rows
// chat rows in chunks of 3 on native model "nat".
func newFlow(t *testing.T, rows int, bodyExtra string) (*Service, *fakes, *mockup.Server) {
	t.Helper()
	return newFlowOn(t, mockup.Options{BatchDelay: 10 * time.Millisecond}, rows, bodyExtra)
}

// newFlowOn is newFlow on a mock provider of options opts.
func newFlowOn(t *testing.T, opts mockup.Options, rows int, bodyExtra string) (*Service, *fakes, *mockup.Server) {
	t.Helper()
	mock := mockup.New(opts)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	models, err := config.ParseModels(fmt.Appendf(nil, "models:\n- {name: nat, provider: openai, base_url: %s/v1, api_key_env: NATIVE_TEST_KEY, batch: native}\n", srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(24 * time.Hour).Unix()
	f := &fakes{b: batch.Batch{ID: "batch_flow", Tenant: "t", Endpoint: "/v1/chat/completions", Status: batch.InProgress,
		CreatedAt: time.Now().Unix(), ExpiresAt: &exp},
		chunks: map[int]batch.Chunk{}, groups: map[int]batch.Group{}, commits: map[int][]part.Outcome{}, commitCalls: map[int]int{}}
	var in bytes.Buffer
	for i := range rows {
		if i%3 == 0 {
			f.chunks[i/3] = batch.Chunk{Batch: f.b.ID, Tenant: "t", Index: i / 3, FirstRow: i, Model: "nat", Start: int64(in.Len()), State: batch.ChunkPending}
		}
		text := fmt.Sprintf("row %d", i)
		if i == 4 {
			text += " [[mock:batch_expire]]"
		}
		fmt.Fprintf(&in, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":{"model":"nat"%s,"messages":[{"role":"user","content":%q}]}}`+"\n", i, bodyExtra, text)
		c := f.chunks[i/3]
		c.Rows, c.End = c.Rows+1, int64(in.Len())
		f.chunks[i/3] = c
	}
	f.input = in.Bytes()
	s := &Service{Store: f, Blobs: f, Queue: f, Engine: f, Models: models, Keys: testKey{}, Now: time.Now,
		Provider: &provider.Client{Models: models, Keys: testKey{}}, Log: slog.New(slog.DiscardHandler),
		Limits: map[config.Provider]Limit{config.OpenAI: {Rows: 6, Bytes: 1 << 20}}, PollMin: time.Millisecond}
	return s, f, mock
}

// deliver hands every message sent to s until none is left.
func deliver(t *testing.T, s *Service, f *fakes) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		msgs := f.take()
		if len(msgs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still sending %+v", msgs)
		}
		time.Sleep(20 * time.Millisecond)
		for _, m := range msgs {
			for range 2 { // every message delivered twice
				if err := s.Handle(context.Background(), m, false); err != nil {
					t.Fatalf("%s: %v", m.Type, err)
				}
			}
		}
	}
}

// A group whose every row was refused at create sends nothing to the
// provider, which refuses an empty batch: the rows get their error lines.
func TestFlowAllRefused(t *testing.T) {
	t.Parallel()
	s, f, mock := newFlow(t, 4, `,"relay":{"refused":"no"}`)
	if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
		t.Fatal(err)
	}
	deliver(t, s, f)
	for i := range len(f.chunks) {
		for j, o := range f.commits[i] {
			if o.Result.ErrCode != inference.CodeInvalidRequest {
				t.Fatalf("chunk %d row %d: got %+v, want %s", i, j, o.Result, inference.CodeInvalidRequest)
			}
		}
	}
	if st := mock.Stats(); st.BatchesCreated != 0 || st.Requests != 0 || len(f.commits) != 2 {
		t.Fatalf("%d commits; mock: %d provider batches, %d requests; want 2, 0, 0", len(f.commits), st.BatchesCreated, st.Requests)
	}
}

// The rows of a group whose model the batch's key may not use (a message
// batch retried by another key of the tenant) never reach the provider:
// no provider batch is created, and each row, run directly, fails
// model_not_allowed unsent (docs/api.md "Budgets, revocation and
// allow-lists").
func TestFlowModelOutsideTheAllowList(t *testing.T) {
	t.Parallel()
	s, f, mock := newFlow(t, 4, "")
	f.allowed = func(m string) bool { return m != "nat" }
	if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
		t.Fatal(err)
	}
	deliver(t, s, f)
	rows := 0
	for i := range len(f.chunks) {
		for j, o := range f.commits[i] {
			rows++
			if o.Result.ErrCode != inference.CodeModelNotAllowed {
				t.Fatalf("chunk %d row %d: got %+v, want %s", i, j, o.Result, inference.CodeModelNotAllowed)
			}
		}
	}
	if st := mock.Stats(); st.BatchesCreated != 0 || st.Requests != 0 || rows != 4 {
		t.Fatalf("%d rows committed; mock: %d provider batches, %d requests; want 4, 0, 0", rows, st.BatchesCreated, st.Requests)
	}
}

// A whole native batch on fakes: the steps' messages are delivered (each
// poll twice, as SQS may) until none is left; every row is committed once,
// from the provider batch or, for the expired one, directly.
func TestFlowDeliversEachRowOnce(t *testing.T) {
	t.Parallel()
	s, f, mock := newFlow(t, 10, "")
	ctx := context.Background()
	rest, err := s.Start(ctx, f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}, {Model: "direct", Batch: f.b.ID}})
	if err != nil || len(rest) != 1 || rest[0].Model != "direct" {
		t.Fatalf("Start: got %+v, %v; want the direct model's entry back", rest, err)
	}
	if len(f.groups) != 2 || f.b.Execution != batch.ExecHybrid {
		t.Fatalf("groups %+v, execution %q; want 2 groups, hybrid (a direct model too)", f.groups, f.b.Execution)
	}
	deliver(t, s, f)
	for i, g := range f.groups {
		if g.State != batch.GroupEnded || !strings.HasPrefix(g.ProviderID, "batch_") {
			t.Fatalf("group %d: %+v", i, g)
		}
	}
	rows := 0
	for i := range len(f.chunks) {
		for j, o := range f.commits[i] {
			if o.CustomID != fmt.Sprintf("c%d", 3*i+j) || !o.Result.OK() {
				t.Fatalf("chunk %d row %d: %+v", i, j, o)
			}
			var body struct {
				Choices []struct{ Message struct{ Content string } }
			}
			_ = json.Unmarshal(o.Result.Body, &body)
			if !strings.HasPrefix(body.Choices[0].Message.Content, fmt.Sprintf("echo: row %d", 3*i+j)) || o.Result.Usage.TotalTokens == 0 {
				t.Fatalf("chunk %d row %d: body %s usage %+v", i, j, o.Result.Body, o.Result.Usage)
			}
			rows++
		}
	}
	st := mock.Stats()
	if rows != 10 || st.BatchRows["nat"] != 9 || st.Requests != 1 || st.BatchesCreated != 2 {
		t.Fatalf("%d rows committed; mock ran %v in %d provider batches and %d directly; want 10, 9 in 2, 1", rows, st.BatchRows, st.BatchesCreated, st.Requests)
	}
}

// Two deliveries of one poll at the same time (SQS may deliver a message
// twice at once): while the first imports the provider batch, the second
// backs off (its poll sent again for later) without reading results,
// running a row or committing; every chunk commits once and the row the
// provider did not answer runs directly once.
func TestFlowDuplicatePollImportsOnce(t *testing.T) {
	t.Parallel()
	s, f, mock := newFlow(t, 6, "")
	ctx := context.Background()
	if _, err := s.Start(ctx, f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	f.onCommit = func(batch.Chunk) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}
	duplicated := false
	for deadline := time.Now().Add(10 * time.Second); ; {
		msgs := f.take()
		if len(msgs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still sending %+v", msgs)
		}
		time.Sleep(20 * time.Millisecond)
		for _, m := range msgs {
			done := make(chan error, 1)
			go func() { done <- s.Handle(ctx, m, false) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v", m.Type, err)
				}
			case <-entered:
				// m's import is under way: its duplicate arrives now.
				if err := s.Handle(ctx, m, false); err != nil {
					t.Fatalf("duplicate %s: %v", m.Type, err)
				}
				if n := f.commitCalls[0] + f.commitCalls[1]; n != 0 {
					t.Errorf("the duplicate committed %d chunks while the first delivery imported", n)
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatalf("%s: %v", m.Type, err)
				}
				duplicated, entered = true, nil
			}
		}
	}
	if !duplicated {
		t.Fatal("no import ran")
	}
	for i := range len(f.chunks) {
		if f.commitCalls[i] != 1 {
			t.Errorf("chunk %d committed %d times, want once", i, f.commitCalls[i])
		}
	}
	if st := mock.Stats(); st.Requests != 1 {
		t.Errorf("rows run directly: %d, want 1 (the row the provider batch expired)", st.Requests)
	}
	if g := f.groups[0]; g.State != batch.GroupEnded {
		t.Errorf("group: %+v, want ended", g)
	}
}

// A dead group whose chunks' dead messages could not be sent is not
// ended: the dead-letter step's retry claims them again and sends them
// (docs/design.md "Native batches", "Dead groups"), rather than leaving
// them to expire with the window.
func TestDeadGroupRetriedUntilItsChunksAreSent(t *testing.T) {
	t.Parallel()
	s, f, _ := newFlow(t, 6, "")
	ctx := context.Background()
	if _, err := s.Start(ctx, f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
		t.Fatal(err)
	}
	submit := f.take()
	if len(submit) != 1 || submit[0].Type != msg.NativeSubmit {
		t.Fatalf("sent %+v, want one submit", submit)
	}
	if err := s.Handle(ctx, submit[0], false); err != nil {
		t.Fatal(err)
	}
	poll := f.take()
	if len(poll) != 1 || poll[0].Type != msg.NativePoll {
		t.Fatalf("sent %+v, want one poll", poll)
	}
	// The poll ran out of receives; its dead-letter step fails to send.
	f.sendErr = errors.New("throttled")
	if err := s.Handle(ctx, poll[0], true); err == nil {
		t.Fatal("dead step: got no error, want the failed send's")
	}
	if g := f.groups[0]; g.State == batch.GroupEnded {
		t.Fatalf("group ended before its chunks' dead messages were sent: %+v", g)
	}
	if err := s.Handle(ctx, poll[0], true); err != nil {
		t.Fatal(err)
	}
	var dead []int
	for _, m := range f.take() {
		if m.Type == msg.Dead {
			dead = append(dead, m.Chunk)
		}
	}
	if !slices.Equal(dead, []int{0, 1}) {
		t.Errorf("dead messages for chunks %v, want 0 and 1", dead)
	}
	if g := f.groups[0]; g.State != batch.GroupEnded {
		t.Errorf("group: %+v, want ended", g)
	}
}

// outcomes counts f's committed rows by what they got: a refusal's code,
// "ok" for an answer, else the answer's error code.
func outcomes(f *fakes) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := map[string]int{}
	for _, outs := range f.commits {
		for _, o := range outs {
			switch {
			case o.Code != "":
				got[o.Code]++
			case o.Result.OK():
				got["ok"]++
			default:
				got[o.Result.ErrCode]++
			}
		}
	}
	return got
}

// handleSent delivers the messages sent so far once each, and no more.
func handleSent(t *testing.T, s *Service, f *fakes) {
	t.Helper()
	for _, m := range f.take() {
		if err := s.Handle(context.Background(), m, false); err != nil {
			t.Fatalf("%s: %v", m.Type, err)
		}
	}
}

// waitEnded waits until group g's provider batch has ended.
func waitEnded(t *testing.T, s *Service, g batch.Group) {
	t.Helper()
	ctx := context.Background()
	up, err := s.upstream(ctx, batch.Batch{}, g.Model)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r, err := up.get(ctx, g.ProviderID)
		if err != nil {
			t.Fatal(err)
		}
		if r.ended {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider batch %s of group %d never ended", g.ProviderID, g.Index)
		}
	}
}

// A tenant stopped after its batch was planned (its key disabled, or its
// budget spent by its other batches) creates no provider batch: no row
// reaches the provider, and each gets the line direct work gets when its
// run is refused (docs/design.md "Native batches", "Governance").
func TestFlowRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, f, mock := newFlow(t, 4, "")
			tc.refuse(governed(f))
			if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
				t.Fatal(err)
			}
			deliver(t, s, f)
			if got, want := outcomes(f), map[string]int{tc.code: 4}; !maps.Equal(got, want) {
				t.Errorf("rows: got %v, want %v", got, want)
			}
			if st := mock.Stats(); st.BatchesCreated != 0 || st.Requests != 0 {
				t.Errorf("mock: %d provider batches, %d requests; want none", st.BatchesCreated, st.Requests)
			}
			if g := f.groups[0]; g.State != batch.GroupEnded {
				t.Errorf("group: %+v, want ended", g)
			}
		})
	}
}

// An import whose provider batch left a row unanswered (row 4 expires in
// it) after the tenant was stopped records the answers already paid for
// and runs nothing new: the unanswered row gets the refusal's line.
func TestFlowImportRefusesRescueRows(t *testing.T) {
	t.Parallel()
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, f, mock := newFlow(t, 6, "")
			state := governed(f)
			if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
				t.Fatal(err)
			}
			handleSent(t, s, f) // the submit
			waitEnded(t, s, f.groups[0])
			tc.refuse(state)
			deliver(t, s, f)
			if got, want := outcomes(f), map[string]int{"ok": 5, tc.code: 1}; !maps.Equal(got, want) {
				t.Errorf("rows: got %v, want %v", got, want)
			}
			if o := f.commits[1][1]; o.Code != tc.code {
				t.Errorf("row 4: got code %q (answer %d %q), want %s", o.Code, o.Result.StatusCode, o.Result.ErrCode, tc.code)
			}
			if st := mock.Stats(); st.Requests != 0 || st.BatchRows["nat"] != 5 {
				t.Errorf("mock: %d rows run directly, %d in the provider batch; want 0, 5", st.Requests, st.BatchRows["nat"])
			}
		})
	}
}

// A group whose provider batch is running when the tenant is stopped has
// it cancelled at its next poll; once it has ended, the rows it did not
// answer (here all: the provider ran none before the cancel) get the
// refusal's line, none run directly.
func TestFlowRefusedWhileRunningCancels(t *testing.T) {
	t.Parallel()
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, f, mock := newFlowOn(t, mockup.Options{BatchDelay: time.Hour}, 6, "")
			state := governed(f)
			if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
				t.Fatal(err)
			}
			handleSent(t, s, f) // the submit
			if g := f.groups[0]; g.State != batch.GroupSubmitted {
				t.Fatalf("group after the submit: %+v, want submitted", g)
			}
			tc.refuse(state)
			deliver(t, s, f)
			if got, want := outcomes(f), map[string]int{tc.code: 6}; !maps.Equal(got, want) {
				t.Errorf("rows: got %v, want %v", got, want)
			}
			st := mock.Stats()
			if st.BatchCancels != 1 || st.Requests != 0 || st.BatchRows["nat"] != 0 {
				t.Errorf("mock: %d cancels, %d rows run directly, %d in the provider batch; want 1, 0, 0", st.BatchCancels, st.Requests, st.BatchRows["nat"])
			}
			if g := f.groups[0]; g.State != batch.GroupEnded || !g.CancelSent {
				t.Errorf("group: %+v, want ended, its provider batch cancelled", g)
			}
		})
	}
}

// A native batch with a webhook_url gets batch.in_progress when a group is
// submitted to its provider, as a direct batch does when a chunk starts
// (docs/api.md "Webhooks"): before, only the executor's runs announced it,
// so a batch of native models never sent it.
func TestNativeSubmitAnnouncesInProgress(t *testing.T) {
	t.Parallel()
	s, f, _ := newFlow(t, 4, "")
	url := "https://hooks.example/x"
	f.b.WebhookURL = &url
	if _, err := s.Start(context.Background(), f.b, []sched.Ready{{Model: "nat", Batch: f.b.ID}}); err != nil {
		t.Fatal(err)
	}
	deliver(t, s, f)
	if f.announced.Load() == 0 {
		t.Fatal("no batch.in_progress announced for a native batch")
	}
}
