package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaybatch/relay/internal/audit"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/blob"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/msg"
	"github.com/relaybatch/relay/internal/ops"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/store"
)

// adminCommands are the commands of relay admin: what docs/runbook.md's
// checks and fixes run. Each reads the service's table and queues with the
// caller's AWS credentials, as relay keys does, and is safe to run twice.
var adminCommands = []string{"batch", "models", "dlq", "tick", "audit"}

func runAdmin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErr("admin: want %s", oneOf(adminCommands))
	}
	switch args[0] {
	case "batch":
		return runAdminBatch(ctx, args[1:], stdout, stderr)
	case "models":
		return runAdminModels(ctx, args[1:], stdout, stderr)
	case "dlq":
		return runAdminDLQ(ctx, args[1:], stdout, stderr)
	case "tick":
		return runAdminTick(ctx, args[1:], stdout, stderr)
	case "audit":
		return runAdminAudit(ctx, args[1:], stdout, stderr)
	}
	return usageErr("admin: unknown command %q: want %s", args[0], oneOf(adminCommands))
}

// writeJSON prints v indented, for people and for jq alike.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runAdminBatch is relay admin batch inspect ID: what the store holds of
// one batch, and what in it looks wrong (batchReport.Problems); or relay
// admin batch requeue ID: the message that moves it on, sent again.
func runAdminBatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("admin batch", "inspect|requeue ID [--tenant NAME]")
	tenant := fs.String("tenant", "", "the batch's tenant; needed only for a batch that has no chunks yet (validating)")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	if len(pos) != 2 || (pos[0] != "inspect" && pos[0] != "requeue") {
		return usageErr("admin batch: want inspect ID or requeue ID")
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	id := pos[1]
	chunks, err := s.Chunks(ctx, id)
	if err != nil {
		return err
	}
	if *tenant == "" && len(chunks) > 0 {
		*tenant = chunks[0].Tenant
	}
	if *tenant == "" {
		return usageErr("admin batch %s %s: it has no chunks (not planned yet, or no such batch): give --tenant NAME", pos[0], id)
	}
	b, err := s.GetBatch(ctx, *tenant, id)
	if err != nil {
		return fmt.Errorf("batch %s of tenant %s: %w", id, *tenant, err)
	}
	if pos[0] == "requeue" {
		return requeue(ctx, b, stdout)
	}
	ready := map[string][]sched.Ready{}
	for _, m := range chunkModels(chunks) {
		rs, err := s.ReadyEntries(ctx, m)
		if err != nil {
			return err
		}
		ready[m] = rs
	}
	markers, err := s.InflightMarkers(ctx, b.Tenant)
	if err != nil {
		return err
	}
	held := slices.ContainsFunc(markers, func(m store.InflightMarker) bool { return m.Batch == id })
	return writeJSON(stdout, inspectBatch(b, chunks, ready, held, time.Now()))
}

// requeue sends batch b's next step again (requeueMessage).
func requeue(ctx context.Context, b batch.Batch, stdout io.Writer) error {
	queueKey, m, err := requeueMessage(b, time.Now())
	if err != nil {
		return err
	}
	q, err := adminQueues(ctx)
	if err != nil {
		return err
	}
	if err := q.Send(ctx, queueKey, m, 0); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s of %s sent to the %s queue\n", m.Type, b.ID, queueKey)
	return nil
}

// requeueMessage is the message that moves batch b on from where it is at
// now: its next step (batch.Batch.NextStep, what the tick sends when due,
// docs/design.md "Tick"), except that a terminal batch's finalize is sent
// again (it then only repeats giving back the tenant's slot and queueing
// the webhook), and a batch whose window ended before its plan gets a tick
// (which ends it expired). Its handler's fences make a message sent
// twice do the work once. A batch whose chunks run has nothing to requeue:
// its chunks' leases carry it.
func requeueMessage(b batch.Batch, now time.Time) (string, msg.Message, error) {
	m := msg.Message{Tenant: b.Tenant, Batch: b.ID}
	step := b.NextStep(now)
	switch {
	case b.Status == batch.Scheduled:
		return "", m, fmt.Errorf("%s is a template: its runs are batches of their own", b.ID)
	case b.Status.Terminal(), step == batch.StepFinalize:
		m.Type = msg.Finalize
		return resources.Finalize, m, nil
	case step == batch.StepDrain:
		m.Type = msg.Drain
	case step == batch.StepPlan:
		m.Type = msg.Plan
	case step == batch.StepExpire:
		m.Type = msg.Tick
	default:
		return "", m, fmt.Errorf("%s has chunks running or waiting for capacity: nothing to requeue (relay admin batch inspect %s; relay admin tick takes over ended leases)", b.ID, b.ID)
	}
	return resources.Dispatch, m, nil
}

// chunkModels are the models of cs, each once, in order.
func chunkModels(cs []batch.Chunk) []string {
	var ms []string
	for _, c := range cs {
		if !slices.Contains(ms, c.Model) {
			ms = append(ms, c.Model)
		}
	}
	return ms
}

// batchReport is relay admin batch inspect's answer.
type batchReport struct {
	ID     string       `json:"id"`
	Tenant string       `json:"tenant"`
	Status batch.Status `json:"status"`
	Counts batch.Counts `json:"request_counts"`
	// Started, ChunksTotal and ChunksDone are the plan's and commits'
	// marks on the record (docs/design.md "State machines").
	Started      bool               `json:"started"`
	ChunksTotal  int                `json:"chunks_total"`
	ChunksDone   int                `json:"chunks_done"`
	Chunks       map[string]int     `json:"chunks_by_state"`
	Claimed      []ops.ClaimedChunk `json:"claimed"`
	Ready        []sched.Ready      `json:"ready_entries"`
	InflightSlot bool               `json:"holds_inflight_slot"`
	FinalizeDue  *time.Time         `json:"finalize_due,omitempty"`
	Problems     []string           `json:"problems"`
}

// inspectBatch builds b's report from its chunks, its models' ready
// entries and whether it holds its tenant's in-flight slot, at now. The
// problems it names are the states docs/runbook.md explains.
func inspectBatch(b batch.Batch, cs []batch.Chunk, ready map[string][]sched.Ready, held bool, now time.Time) batchReport {
	r := batchReport{
		ID: b.ID, Tenant: b.Tenant, Status: b.Status, Counts: b.RequestCounts,
		Started: b.Started, ChunksTotal: b.ChunksTotal, ChunksDone: b.ChunksDone,
		Chunks: map[string]int{}, InflightSlot: held, Problems: []string{},
	}
	if b.FinalizeDue > 0 {
		t := time.Unix(b.FinalizeDue, 0).UTC()
		r.FinalizeDue = &t
	}
	for _, es := range ready {
		for _, e := range es {
			if e.Batch == b.ID {
				r.Ready = append(r.Ready, e)
			}
		}
	}
	waiting := map[string]bool{} // models with a pending chunk
	for _, c := range cs {
		state := string(c.State)
		if c.Dead {
			state = "dead"
		}
		r.Chunks[state]++
		switch c.State {
		case batch.ChunkPending:
			waiting[c.Model] = true
		case batch.ChunkClaimed:
			cc := ops.Claimed(c)
			r.Claimed = append(r.Claimed, cc)
			if late := ops.LeaseEnded(cc, now); late > 0 {
				r.Problems = append(r.Problems, fmt.Sprintf("lease-expired: chunk %d (run %s, attempt %d) lost its lease %s ago: the tick takes it over (relay admin tick)",
					c.Index, c.Run, c.Attempts, late.Round(time.Second)))
			}
		}
	}
	r.Problems = append(r.Problems, batchProblems(b, r, waiting, now)...)
	return r
}

// batchProblems are the whole-batch states that need a look: chunks no
// claim can find, a batch done but not finalized, slots held too long.
func batchProblems(b batch.Batch, r batchReport, waiting map[string]bool, now time.Time) []string {
	var ps []string
	if b.Status == batch.InProgress && b.Started {
		for m := range waiting {
			if !slices.ContainsFunc(r.Ready, func(e sched.Ready) bool { return e.Model == m }) {
				ps = append(ps, fmt.Sprintf("no-ready-entry: chunks of %s are pending but the batch has no ready entry for it: no claim will find them", m))
			}
		}
	}
	if !b.Status.Terminal() && b.ChunksTotal > 0 && b.ChunksDone >= b.ChunksTotal && b.FinalizeDue > 0 && now.Unix() > b.FinalizeDue {
		ps = append(ps, "not-finalized: every chunk is done and its finalize is overdue: the tick re-sends it (relay admin tick; relay admin dlq list finalize)")
	}
	if b.Status == batch.Validating && !b.Started && b.PlanLease > 0 && now.UnixMilli() > b.PlanLease {
		ps = append(ps, "plan-stalled: still validating with its plan lease ended: the tick re-sends its plan (relay admin tick; relay admin dlq list dispatch)")
	}
	if b.Status.Terminal() && r.InflightSlot {
		ps = append(ps, "slot-held: the batch is terminal and still holds one of its tenant's in-flight slots: its finalize's last step did not run (relay admin dlq list finalize)")
	}
	slices.Sort(ps)
	return ps
}

// runAdminModels is relay admin models: each configured model's capacity
// in use, per shard, and the batches waiting for it.
func runAdminModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("admin models", "")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	if len(pos) != 0 {
		return usageErr("admin models takes no arguments")
	}
	models, err := config.LoadModels(config.ModelsPath())
	if err != nil {
		return err
	}
	s, err := keyStore(ctx)
	if err != nil {
		return err
	}
	reports, err := ops.Models(ctx, s, models, time.Now())
	if err != nil {
		return err
	}
	return writeJSON(stdout, reports)
}

// runAdminTick is relay admin tick: one tick now, as the schedule sends it
// every minute (docs/design.md "Tick"). A tick does only what is due, so
// an extra one costs nothing.
func runAdminTick(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("admin tick", "")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	if len(pos) != 0 {
		return usageErr("admin tick takes no arguments")
	}
	q, err := adminQueues(ctx)
	if err != nil {
		return err
	}
	if err := q.Send(ctx, resources.Dispatch, msg.Message{Type: msg.Tick}, 0); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "tick sent to the dispatch queue")
	return nil
}

// adminQueues is a sender to the deployment's queues, on the same AWS
// configuration as keyStore.
func adminQueues(ctx context.Context) (*queue.Sender, error) {
	cfg, env, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return &queue.Sender{SQS: sqs.NewFromConfig(cfg), Prefix: env.Prefix}, nil
}

// dlqKeys are the queues whose DLQ relay admin dlq reads.
var dlqKeys = ops.DLQKeys

// runAdminDLQ is relay admin dlq list|redrive QUEUE [--batch ID].
func runAdminDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("admin dlq", "list|redrive "+strings.Join(dlqKeys, "|")+" [--batch ID]")
	only := fs.String("batch", "", "only the messages of this batch")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	if len(pos) != 2 || (pos[0] != "list" && pos[0] != "redrive") || !slices.Contains(dlqKeys, pos[1]) {
		return usageErr("admin dlq: want list or redrive, then one of %s", oneOf(dlqKeys))
	}
	q, err := adminQueues(ctx)
	if err != nil {
		return err
	}
	d := dlq{q: q, key: pos[1], batch: *only}
	if pos[0] == "list" {
		ms, err := d.list(ctx)
		if err != nil {
			return err
		}
		return writeJSON(stdout, ms)
	}
	n, err := d.redrive(ctx)
	fmt.Fprintf(stdout, "%d message(s) moved from %s-dlq back to %s\n", n, pos[1], pos[1])
	return err
}

// dlq reads one queue's dead-letter queue.
type dlq struct {
	q     *queue.Sender
	key   string // resources.Dispatch, …
	batch string // only this batch's messages, if set
}

// dlqMessage is one message of a DLQ as relay admin dlq list shows it.
type dlqMessage struct {
	ID       string          `json:"message_id"`
	Batch    string          `json:"batch_id,omitempty"`
	Tenant   string          `json:"tenant,omitempty"`
	Type     string          `json:"type,omitempty"`
	Receives string          `json:"receive_count"`
	Body     json.RawMessage `json:"body"`
	raw      string          // the body as received, what a redrive sends
	receipt  string
}

// receiveAll receives every message of the DLQ once (each stays invisible
// for a minute, so each is seen once).
func (d dlq) receiveAll(ctx context.Context) (string, []dlqMessage, error) {
	url, err := d.q.URL(ctx, d.key+"-dlq")
	if err != nil {
		return "", nil, err
	}
	var out []dlqMessage
	seen := map[string]bool{}
	for {
		r, err := d.q.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 60, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		})
		if err != nil {
			return "", nil, fmt.Errorf("receive from %s-dlq: %w", d.key, err)
		}
		fresh := 0
		for _, m := range r.Messages {
			id := aws.ToString(m.MessageId)
			if seen[id] {
				continue
			}
			seen[id], fresh = true, fresh+1
			dm := dlqMessage{ID: id, Receives: m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)], receipt: aws.ToString(m.ReceiptHandle)}
			var head msg.Message
			dm.raw = aws.ToString(m.Body)
			body := []byte(dm.raw)
			if json.Unmarshal(body, &head) == nil {
				dm.Batch, dm.Tenant, dm.Type = head.Batch, head.Tenant, head.Type
			}
			if !json.Valid(body) {
				body, _ = json.Marshal(string(body))
			}
			dm.Body = body
			out = append(out, dm)
		}
		if fresh == 0 {
			return url, out, nil
		}
	}
}

// show makes ms visible again at once.
func (d dlq) show(ctx context.Context, url string, ms []dlqMessage) error {
	var errs []error
	for _, m := range ms {
		if _, err := d.q.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: &m.receipt}); err != nil {
			errs = append(errs, fmt.Errorf("%s stays invisible for a minute: %w", m.ID, err))
		}
	}
	return errors.Join(errs...)
}

// split divides ms into d.batch's and the others (all are d.batch's when
// it is not set).
func (d dlq) split(ms []dlqMessage) (mine, others []dlqMessage) {
	mine = []dlqMessage{}
	for _, m := range ms {
		if d.batch == "" || m.Batch == d.batch {
			mine = append(mine, m)
		} else {
			others = append(others, m)
		}
	}
	return mine, others
}

// list shows the DLQ's messages, leaving them there.
func (d dlq) list(ctx context.Context) ([]dlqMessage, error) {
	url, ms, err := d.receiveAll(ctx)
	if err != nil {
		return nil, err
	}
	mine, _ := d.split(ms)
	return mine, d.show(ctx, url, ms)
}

// redrive sends each message back to its source queue as it is, then
// deletes it from the DLQ. The handlers take it as any delivery, through
// the same fences (a stale run's chunk message is dropped, a plan or
// finalize of a batch past it does nothing), so a message sent twice (a
// redrive cut between the send and the delete) does no work twice.
func (d dlq) redrive(ctx context.Context) (int, error) {
	dlqURL, all, err := d.receiveAll(ctx)
	if err != nil {
		return 0, err
	}
	ms, others := d.split(all)
	errs := []error{d.show(ctx, dlqURL, others)}
	to, err := d.q.URL(ctx, d.key)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if _, err := d.q.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &to, MessageBody: &m.raw}); err != nil {
			errs = append(errs, fmt.Errorf("send %s back to %s: %w", m.ID, d.key, err))
			continue
		}
		if _, err := d.q.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &dlqURL, ReceiptHandle: &m.receipt}); err != nil {
			errs = append(errs, fmt.Errorf("delete %s from %s-dlq (it was sent back; its handler absorbs the copy): %w", m.ID, d.key, err))
		}
		n++
	}
	return n, errors.Join(errs...)
}

// runAdminAudit is relay admin audit verify|query: the audit trail's
// chains checked from their first object, or its entries of a batch or a
// key (docs/runbook.md "Audit trail").
func runAdminAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("admin audit", "verify [--from YYYY-MM-DD] [--to YYYY-MM-DD] | query --batch ID | --key KEY_ID")
	from := fs.String("from", "", "only chains begun on or after this day (UTC)")
	to := fs.String("to", "", "only chains begun on or before this day (UTC)")
	batchID := fs.String("batch", "", "query: the entries of this batch")
	keyID := fs.String("key", "", "query: the entries of this key, as caller or submitter")
	pos, err := parseArgs(fs, args, stdout, stderr)
	if err != nil {
		return helpIsSuccess(err)
	}
	switch {
	case len(pos) != 1 || (pos[0] != "verify" && pos[0] != "query"):
		return usageErr("admin audit: want verify or query")
	case pos[0] == "query" && (*batchID == "") == (*keyID == ""):
		return usageErr("admin audit query: give --batch ID or --key KEY_ID")
	}
	objs, err := readTrail(ctx, *from, *to)
	if err != nil {
		return err
	}
	if pos[0] == "query" {
		out, err := queryTrail(objs, *batchID, *keyID)
		if werr := writeJSON(stdout, out); werr != nil {
			return werr
		}
		return err
	}
	breaks, entries := audit.Verify(objs)
	if err := writeJSON(stdout, map[string]any{"objects": len(objs), "entries": len(entries), "breaks": breaks}); err != nil {
		return err
	}
	if len(breaks) > 0 {
		return fmt.Errorf("the audit trail does not verify: %s: %s", breaks[0].Key, breaks[0].Reason)
	}
	return nil
}

// queryTrail returns the entries of objs of batch batchID or key keyID
// (as caller or submitter), from the objects that verify, and an error
// naming each chain's break, if any: the entries past a break are left out,
// and the answer must not pass for the whole.
func queryTrail(objs []audit.Object, batchID, keyID string) ([]audit.Entry, error) {
	breaks, entries := audit.Verify(objs)
	out := []audit.Entry{}
	for _, e := range entries {
		if (batchID != "" && e.Batch == batchID) || (keyID != "" && (e.KeyID == keyID || e.OnBehalfOf == keyID)) {
			out = append(out, e)
		}
	}
	var errs []error
	for _, b := range breaks {
		errs = append(errs, fmt.Errorf("the audit trail does not verify from %s (%s): the entries from there on are left out", b.Key, b.Reason))
	}
	return out, errors.Join(errs...)
}

// readTrail reads the audit trail's objects of the chains begun from the
// day from to the day to (either "": unbounded).
func readTrail(ctx context.Context, from, to string) ([]audit.Object, error) {
	cfg, env, err := awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	bs := blob.New(s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = env.S3PathStyle || endpointSet() }), env.Bucket)
	keys, err := bs.List(ctx, audit.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w (the bucket is RELAY_BUCKET, else <RELAY_PREFIX>-data)", err)
	}
	day := func(v string) string { return strings.ReplaceAll(v, "-", "") }
	var objs []audit.Object
	for _, k := range keys {
		chainDay := strings.TrimPrefix(k, audit.Prefix)[:min(8, len(k)-len(audit.Prefix))]
		if (from != "" && chainDay < day(from)) || (to != "" && chainDay > day(to)) {
			continue
		}
		rc, err := bs.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		objs = append(objs, audit.Object{Key: k, Body: body})
	}
	return objs, nil
}
