package store

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/webhook"
)

// These tests build and read items without DynamoDB: the key formats are
// the table's layout (docs/design.md "Data"), and a record must read back
// as it was written.

// str is the value of a string attribute, "<kind>" for any other kind.
func str(av types.AttributeValue) string {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return "N:" + v.Value
	case nil:
		return "<absent>"
	}
	return reflect.TypeOf(av).String()
}

func num(av types.AttributeValue) string {
	if v, ok := av.(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return "<not a number: " + str(av) + ">"
}

func ptr[T any](v T) *T { return &v }

func TestKeyFormats(t *testing.T) {
	t.Parallel()
	lpk, lsk := leaseAttrs("batch_1", 4, time.UnixMilli(1_700_000_000_123))
	capKey := capShardKey("gpt-4o", 7)
	tests := []struct{ name, got, want string }{
		{"tenant partition", tenantPK("acme"), "T#acme"},
		{"batch partition", batchPK("acme"), "T#acme"},
		{"batch sort key", batchSK("batch_1"), "BATCH#batch_1"},
		{"chunk partition", chunksPK("batch_1"), "B#batch_1"},
		{"chunk sort key", chunkSK(2), "CHUNK#000002"},
		{"last six-digit chunk", chunkSK(999_999), "CHUNK#999999"},
		{"workflow record", workflowSK(3), "WF#0000003"},
		{"webhook deliveries", webhookSK, "WEBHOOK"},
		{"completion webhook deliveries", webhookSKOf("batch.completed"), "WEBHOOK"},
		{"queued webhook deliveries", webhookSKOf("batch.queued"), "WEBHOOK#batch.queued"},
		{"in_progress webhook deliveries", webhookSKOf("batch.in_progress"), "WEBHOOK#batch.in_progress"},
		// Every receiver of a batch's event has a delivery record of its own.
		{"operator endpoint's completion deliveries", webhookSKOf(webhook.Record("ops", "batch.failed")), "WEBHOOK@ops"},
		{"operator endpoint's in_progress deliveries", webhookSKOf(webhook.Record("ops", "batch.in_progress")), "WEBHOOK@ops#batch.in_progress"},
		{"operator endpoint's circuit", circuitPK(webhook.OperatorCircuit("ops", "https://ops.example/relay")), "HOOK#operator/ops#ops.example"},
		{"file", fileSK("file-abc"), "FILE#file-abc"},
		{"upload", uploadSK("upload_abc"), "UPLOAD#upload_abc"},
		{"idempotency key", idemSK("9f86d0"), "IDEM#9f86d0"},
		{"key by hash", keyPK("9f86d0"), "KEY#9f86d0"},
		{"key index", keysPK, "KEYS"},
		{"rate counter", rateKey("key_1"), "RL#key_1"},
		{"in-flight counter", inflightSK, "INFLIGHT"},
		{"in-flight marker", inflightPrefix + "batch_1", "INFLIGHT#batch_1"},
		{"usage partition", usagePK("acme"), "USAGE#acme"},
		{"usage sort key", usageSK("2024-05-01", "gpt-4o"), "2024-05-01#gpt-4o"},
		{"ready partition", readyPK("gpt-4o"), "READY#gpt-4o"},
		{"ready entry, priority 0", sched.Ready{Batch: "batch_1", Seq: 2}.SK(), "1000000#000000000002#batch_1"},
		{"ready entry, priority 1000", sched.Ready{Batch: "batch_1", Priority: 1000, Seq: 2}.SK(), "0999000#000000000002#batch_1"},
		{"ready entry, priority -1000", sched.Ready{Batch: "batch_1", Priority: -1000}.SK(), "1001000#000000000000#batch_1"},
		{"ready prefix", sched.ReadyPrefix(5), "0999995#"},
		{"capacity partition", str(capKey["pk"]), "MODEL#gpt-4o"},
		{"capacity shard", str(capKey["sk"]), "CAP#007"},
		{"due sort key", dueSK(1_700_000_000, "acme", "batch_1"), "1700000000#batch_1#acme"},
		{"due cutoff", dueCutoff(time.Unix(1_700_000_000, 0)), "1700000001"},
		{"lease partition", leasePK(3), "LEASE#3"},
		{"lease sort key", str(lsk), "1700000000123#batch_1#000004"},
		{"lease cutoff", leaseCutoff(time.UnixMilli(1_700_000_000_123)), "1700000000123"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if p := str(lpk); !slices.Contains([]string{"LEASE#0", "LEASE#1", "LEASE#2", "LEASE#3"}, p) {
		t.Errorf("lease partition %q is not one of the %d shards", p, leaseShards)
	}
}

// Zero-padded numbers in sort keys order as the numbers do, which every
// Query in order (chunks, shards, due and lease indexes,
// the ready index) relies on.
func TestSortKeysFollowNumbers(t *testing.T) {
	t.Parallel()
	ns := []int{0, 1, 2, 9, 10, 11, 99, 100, 999, 1000, 9999, 10_000, 99_999, 100_000, 999_999}
	leaseAt := func(ms int64) string {
		_, sk := leaseAttrs("batch_z", 0, time.UnixMilli(ms))
		return str(sk)
	}
	keys := map[string]func(n int) string{
		"chunk":    chunkSK,
		"workflow": workflowSK,
		"capacity": func(n int) string { return str(capShardKey("m", n)["sk"]) },
		"due":      func(n int) string { return dueSK(1_700_000_000+int64(n), "t", "batch_z") },
		"active": func(n int) string {
			return str(batchIndexes(&batch.Batch{ID: "z", Status: batch.InProgress, CreatedAt: int64(n)})["gsi1sk"])
		},
		"lease":      func(n int) string { return leaseAt(1_700_000_000_000 + int64(n)) },
		"ready turn": func(n int) string { return sched.Ready{Batch: "z", Seq: int64(n)}.SK() },
		// Higher priorities come first.
		"ready priority": func(n int) string { return sched.Ready{Batch: "a", Priority: 1000 - n}.SK() },
	}
	for name, sk := range keys {
		var got []string
		for _, n := range ns {
			if name == "capacity" && n >= 1000 || name == "ready priority" && n > 2000 {
				continue // beyond the shards (CAP#%03d) or priorities there are
			}
			got = append(got, sk(n))
		}
		if !slices.IsSorted(got) {
			t.Errorf("%s: sort keys out of numeric order: %q", name, got)
		}
	}
	// A batch's id never moves it in the index: the number comes first.
	if !(dueSK(99, "t", "zzzz") < dueSK(100, "t", "aaaa") && sched.Ready{Batch: "zzz", Seq: 1}.SK() < sched.Ready{Batch: "aaa", Seq: 2}.SK()) {
		t.Error("a batch id outweighs the number before it")
	}
}

// The due index holds a batch while DueBatches(now) must return it: its
// due time is at or before now.
func TestDueAndLeaseCutoffs(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, at := range []int64{0, now.Unix() - 3600, now.Unix() - 1, now.Unix(), now.Unix() + 1, now.Unix() + 3600} {
		if got, want := dueSK(at, "acme", "batch_zzzz") < dueCutoff(now), at <= now.Unix(); got != want {
			t.Errorf("due at %d, now %d: listed %v, want %v", at, now.Unix(), got, want)
		}
	}
	nowMS := time.UnixMilli(1_700_000_000_500)
	for _, d := range []time.Duration{-time.Hour, -time.Millisecond, 0, time.Millisecond, time.Minute} {
		_, sk := leaseAttrs("batch_zzzz", 999_999, nowMS.Add(d))
		if got, want := str(sk) < leaseCutoff(nowMS), d < 0; got != want {
			t.Errorf("lease ending %v from now: expired %v, want %v", d, got, want)
		}
	}
	// All of a batch's chunks share one lease partition.
	p0, _ := leaseAttrs("batch_q", 0, nowMS)
	p9, _ := leaseAttrs("batch_q", 9, nowMS.Add(time.Hour))
	if str(p0) != str(p9) {
		t.Errorf("one batch in two lease partitions: %s, %s", str(p0), str(p9))
	}
}

// Usage(from, to) queries the sort keys between usageFrom(from) and
// usageTo(to): exactly the days from..to, every model.
func TestUsageRange(t *testing.T) {
	t.Parallel()
	from, to := "2024-05-02", "2024-05-04"
	for _, day := range []string{"2024-04-30", "2024-05-01", "2024-05-02", "2024-05-03", "2024-05-04", "2024-05-05", "2025-01-01"} {
		for _, model := range []string{"a", "gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "Z", "~model"} {
			sk := usageSK(day, model)
			got := usageFrom(from) <= sk && sk <= usageTo(to)
			if want := from <= day && day <= to; got != want {
				t.Errorf("usage of %s on %s in %s..%s: %v, want %v", model, day, from, to, got, want)
			}
		}
	}
}

// roundTrip decodes it into a new value of want's type and checks it
// equals want.
func roundTrip(t *testing.T, name string, it item, want any) int64 {
	t.Helper()
	got := reflect.New(reflect.TypeOf(want))
	ver, err := fromItem(it, got.Interface())
	if err != nil {
		t.Fatalf("%s: decode: %v", name, err)
	}
	if !reflect.DeepEqual(got.Elem().Interface(), want) {
		t.Errorf("%s: read back\n%+v\nwant\n%+v", name, got.Elem().Interface(), want)
	}
	return ver
}

func wantKey(t *testing.T, name string, it item, pk, sk string) {
	t.Helper()
	if str(it["pk"]) != pk || str(it["sk"]) != sk {
		t.Errorf("%s: at %s/%s, want %s/%s", name, str(it["pk"]), str(it["sk"]), pk, sk)
	}
}

// fullBatch sets every stored field of a batch.
func fullBatch() batch.Batch {
	return batch.Batch{
		ID: "batch_1", Endpoint: "/v1/chat/completions", InputFileID: "file-in", CompletionWindow: "24h",
		Status: batch.InProgress, OutputFileID: ptr("file-out"), ErrorFileID: ptr("file-err"),
		CreatedAt: 1_700_000_000, InProgressAt: ptr[int64](1_700_000_010), ExpiresAt: ptr[int64](1_700_086_400),
		FinalizingAt: ptr[int64](1_700_000_020), CompletedAt: ptr[int64](1_700_000_030), FailedAt: ptr[int64](1_700_000_040),
		ExpiredAt: ptr[int64](1_700_000_050), CancellingAt: ptr[int64](1_700_000_060), CancelledAt: ptr[int64](1_700_000_070),
		RequestCounts: batch.Counts{Total: 10, Completed: 7, Failed: 2},
		Metadata:      map[string]string{"team": "search", "run": "nightly"},
		Model:         ptr("gpt-4o"), Usage: batch.Usage{InputTokens: 100, OutputTokens: 50, TotalTokens: 150},
		Priority: -7, TemplateID: ptr("batch_tpl"), RetryOf: ptr("batch_0"), DeadLetterCount: 1,
		WebhookURL: ptr("https://hooks.example.com/x"), FallbackModel: ptr("gpt-4o-mini"),
		Schedule: ptr("0 6 * * *"), ScheduleTimezone: ptr("Europe/Paris"), OutputExpiresAfter: ptr[int64](7200),
		Tenant: "acme", KeyID: "key_1", CSVModel: "gpt-4o",
		ErrorList:   []jsonl.LineError{{Code: "invalid_json", Message: "line 3 is not JSON", Param: "", Line: 3}},
		Input:       []batch.Object{{Key: "files/acme/file-in/000000", Size: 8 << 20}, {Key: "files/acme/file-in/000001", Size: 12}},
		ChunksTotal: 4, ChunksDone: 3, Recheck: 1_700_000_100, FinalizeDue: 1_700_000_200, Started: true,
		PlanLease: 1_700_000_120, ExpiredRows: 1, CancelledRows: 2,
	}
}

func TestBatchItem(t *testing.T) {
	t.Parallel()
	b := fullBatch()
	// What only the API shows is never stored: it reads back empty.
	shown := b
	shown.Object = "batch"
	shown.Errors = &batch.Errors{Object: "list", Data: b.ErrorList}
	shown.WebhookDeliveries = &batch.WebhookSummary{Status: "delivered", Attempts: 1}
	it, err := batchItem(shown)
	if err != nil {
		t.Fatal(err)
	}
	wantKey(t, "batch", it, "T#acme", "BATCH#batch_1")
	if ver := roundTrip(t, "batch", it, b); ver != 1 {
		t.Errorf("a new batch's version: got %d, want 1", ver)
	}
	// Filters and projections name these attributes (ListBatches of a
	// template: tenant; DueBatches: tenant, id, priority).
	for attr, want := range map[string]string{"tenant": "acme", "id": "batch_1", "priority": "N:-7", "status": "in_progress"} {
		if got := str(it[attr]); got != want {
			t.Errorf("attribute %s: got %s, want %s", attr, got, want)
		}
	}
	proj := item{"tenant": it["tenant"], "id": it["id"], "priority": it["priority"]}
	refs, err := activeRefs([]item{proj})
	if err != nil || len(refs) != 1 || refs[0] != (ActiveRef{Tenant: "acme", ID: "batch_1", Priority: -7}) {
		t.Errorf("due index projection: got %+v, %v", refs, err)
	}
	// A batch with no optional field reads back the same too.
	bare := batch.Batch{ID: "batch_2", Status: batch.Validating, Tenant: "acme", CreatedAt: 5}
	it, err = batchItem(bare)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, "bare batch", it, bare)
}

func TestBatchIndexes(t *testing.T) {
	t.Parallel()
	exp := int64(1_700_086_400)
	tests := []struct {
		name string
		b    batch.Batch
		want map[string]string // index attributes, all of them
	}{
		{
			name: "validating: active, due for its plan",
			b:    batch.Batch{ID: "batch_1", Tenant: "acme", Status: batch.Validating, CreatedAt: 1_700_000_000, ExpiresAt: &exp},
			want: map[string]string{"gsi1pk": "ACTIVE", "gsi1sk": "1700000000#batch_1#acme", "gsi4pk": "DUE", "gsi4sk": "1700000020#batch_1#acme"},
		},
		{
			name: "running: due at the end of its window",
			b:    batch.Batch{ID: "batch_1", Tenant: "acme", Status: batch.InProgress, CreatedAt: 1_700_000_000, ExpiresAt: &exp, ChunksTotal: 3, Started: true},
			want: map[string]string{"gsi1pk": "ACTIVE", "gsi1sk": "1700000000#batch_1#acme", "gsi4pk": "DUE", "gsi4sk": "1700086400#batch_1#acme"},
		},
		{
			name: "running without a window: active, not due",
			b:    batch.Batch{ID: "batch_1", Tenant: "acme", Status: batch.InProgress, CreatedAt: 42, ChunksTotal: 3, Started: true},
			want: map[string]string{"gsi1pk": "ACTIVE", "gsi1sk": "0000000042#batch_1#acme"},
		},
		{
			name: "a template's run",
			b:    batch.Batch{ID: "batch_2", Tenant: "acme", Status: batch.Completed, TemplateID: ptr("batch_tpl"), Settled: true},
			want: map[string]string{"gsi2pk": "TPL#batch_tpl", "gsi2sk": "batch_2"},
		},
		{name: "completed and settled: in no index", b: batch.Batch{ID: "batch_1", Tenant: "acme", Status: batch.Completed, ExpiresAt: &exp, Settled: true}, want: map[string]string{}},
		{name: "failed", b: batch.Batch{ID: "batch_1", Status: batch.Failed, Settled: true}, want: map[string]string{}},
		{name: "expired", b: batch.Batch{ID: "batch_1", Status: batch.Expired, Settled: true}, want: map[string]string{}},
		{name: "cancelled", b: batch.Batch{ID: "batch_1", Status: batch.Cancelled, Settled: true}, want: map[string]string{}},
		{
			name: "completed, follow-ups not recorded: due after the grace",
			b:    batch.Batch{ID: "batch_1", Tenant: "acme", Status: batch.Completed, CompletedAt: &exp},
			want: map[string]string{"gsi4pk": "DUE", "gsi4sk": "1700086420#batch_1#acme"},
		},
		{name: "a template", b: batch.Batch{ID: "batch_tpl", Tenant: "acme", Status: batch.Scheduled, Schedule: ptr("* * * * *")}, want: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{}
			for k, v := range batchIndexes(&tt.b) {
				got[k] = str(v)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			// batchItem carries them, and a batch leaving an index loses
			// them on its next write (update replaces the whole item).
			it, err := batchItem(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "gsi4pk", "gsi4sk"} {
				w, ok := tt.want[k]
				if !ok {
					w = "<absent>"
				}
				if str(it[k]) != w {
					t.Errorf("batch item %s: got %s, want %s", k, str(it[k]), w)
				}
			}
		})
	}
}

func TestRecordItems(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	chunk := batch.Chunk{
		Batch: "batch_1", Tenant: "acme", Index: 2, Start: 1024, End: 2048, FirstRow: 10, Rows: 5, Model: "gpt-4o",
		State: batch.ChunkDone, NextSame: 4, Run: "run_1", Lease: 1_700_000_000_123, Attempts: 2, Slots: 8, Shard: 1,
		Attempt: "run_1", Pattern: "ooeoo", OutBytes: 400, ErrBytes: 90, Fallback: true, PriorAttempts: 4,
		Next: &batch.Next{Tenant: "acme", Batch: "batch_1", Chunk: 4, Run: "run_2", Attempt: 1}, Dead: false,
	}
	chunkIt, err := chunkItem(chunk)
	if err != nil {
		t.Fatal(err)
	}
	rec := file.File{ID: "file-1", Bytes: 99, CreatedAt: 5, Filename: "in.jsonl", Purpose: "batch", Status: "processed",
		StatusDetails: ptr("ok"), ExpiresAt: ptr[int64](77), Tenant: "acme", Objects: []string{"files/acme/file-1/000000"}}
	fileIt, err := itemAt(tenantPK(rec.Tenant), fileSK(rec.ID), rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	up := file.Upload{ID: "upload_1", Bytes: 10, CreatedAt: 5, Filename: "in.jsonl", Purpose: "batch", MimeType: "text/jsonl",
		Status: "pending", ExpiresAt: 9, FileID: "file-2", FileExpiresAfter: 3600, Tenant: "acme"}
	upIt, err := itemAt(tenantPK(up.Tenant), uploadSK(up.ID), up, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := apikey.Key{Hash: "9f86d081884c7d65", ID: "9f86d081884c", Tenant: "acme", Scopes: []string{"batches", "files"}, CreatedAt: 5}
	mainIt, idxIt, err := keyItems(k)
	if err != nil {
		t.Fatal(err)
	}
	ready := sched.Ready{Model: "gpt-4o", Tenant: "acme", Batch: "batch_1", Priority: 3, Seq: 17, Next: 4, Mixed: true, Total: 9}
	readyIt := readyItem(ready)
	wh := WebhookDeliveries{Batch: "batch_1", EventID: "evt_1", Count: 3, FirstAttempt: time.Unix(1_700_000_000, 0).UTC(), GaveUp: true,
		Attempts: []webhook.Attempt{{N: 1, At: 1, StatusCode: 500, DurationMS: 30}, {N: 2, At: 2, Error: "timeout", Permanent: true}}}
	whIt, err := itemAt(chunksPK(wh.Batch), webhookSK, wh, nil)
	if err != nil {
		t.Fatal(err)
	}
	tenantIt, err := itemAt(tenantPK("acme"), "TENANT", tenantRecord{WebhookSecret: "whsec_x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		it     item
		pk, sk string
		want   any
	}{
		{"chunk", chunkIt, "B#batch_1", "CHUNK#000002", chunk},
		{"file", fileIt, "T#acme", "FILE#file-1", rec},
		{"upload", upIt, "T#acme", "UPLOAD#upload_1", up},
		{"key", mainIt, "KEY#9f86d081884c7d65", "KEY", k},
		{"key index entry", idxIt, "KEYS", "9f86d081884c", k},
		{"ready entry", readyIt, "READY#gpt-4o", "0999997#000000000017#batch_1", ready},
		{"webhook deliveries", whIt, "B#batch_1", "WEBHOOK", wh},
		{"tenant", tenantIt, "T#acme", "TENANT", tenantRecord{WebhookSecret: "whsec_x"}},
		{"in-flight marker", inflightMarkerItem("acme", "batch_1", now), "T#acme", "INFLIGHT#batch_1", InflightMarker{Batch: "batch_1", CreatedAt: now.Unix()}},
		{"idempotency key", idemItem("acme", IdemKey{Key: "9f86d0", Body: "b0d1"}, "batch_1", now), "T#acme", "IDEM#9f86d0", Idem{BatchID: "batch_1", Body: "b0d1"}},
	}
	for _, tt := range tests {
		wantKey(t, tt.name, tt.it, tt.pk, tt.sk)
		if ver := roundTrip(t, tt.name, tt.it, tt.want); ver != 0 {
			t.Errorf("%s: version %d before any update", tt.name, ver)
		}
	}
	// ListFiles filters on the purpose attribute.
	if str(fileIt["purpose"]) != "batch" {
		t.Errorf("file purpose attribute: %s", str(fileIt["purpose"]))
	}
	// TTL removes an idempotency record a day after the create.
	if got := num(idemItem("acme", IdemKey{Key: "h"}, "batch_1", now)["ttl"]); got != strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10) {
		t.Errorf("idempotency ttl: got %s", got)
	}
}

// put and update write extra attributes over v's own, and the key over both
// of v's; get reads the version back.
func TestItemAtAndVersion(t *testing.T) {
	t.Parallel()
	type rec struct {
		PK   string `dynamodbav:"pk"`
		Name string `dynamodbav:"name"`
		N    int    `dynamodbav:"n"`
	}
	it, err := itemAt("P", "S", rec{PK: "spoofed", Name: "n"}, item{"name": avS("extra"), "gsi9pk": avS("X")})
	if err != nil {
		t.Fatal(err)
	}
	if str(it["pk"]) != "P" || str(it["sk"]) != "S" || str(it["name"]) != "extra" || str(it["gsi9pk"]) != "X" {
		t.Fatalf("item: %v", it)
	}
	it["ver"] = avN(12)
	var r rec
	if ver, err := fromItem(it, &r); err != nil || ver != 12 || r.Name != "extra" {
		t.Fatalf("read back %+v, version %d, %v", r, ver, err)
	}
	if _, err := fromItem(item{"n": avS("three")}, &r); err == nil {
		t.Fatal("a string decoded into a number field")
	}
}

func TestCapShardOf(t *testing.T) {
	t.Parallel()
	withInflight := func(k item, n int) item {
		k["inflight"] = avN(n)
		return k
	}
	tests := []struct {
		name          string
		it            item
		shard, slots  int
		ok, wantError bool
	}{
		{"a shard", withInflight(capShardKey("m", 3), 12), 3, 12, true, false},
		{"shard 999", withInflight(capShardKey("m", 999), 1000), 999, 1000, true, false},
		{"a shard never claimed from", capShardKey("m", 0), 0, 0, true, false},
		{"slots given back below zero", withInflight(capShardKey("m", 1), -2), 1, -2, true, false},
		{"not a shard", key("MODEL#m", "CONFIG"), 0, 0, false, false},
		{"inflight not a number", item{"sk": avS("CAP#001"), "inflight": avS("x")}, 0, 0, false, true},
	}
	for _, tt := range tests {
		shard, slots, ok, err := capShardOf(tt.it)
		if (err != nil) != tt.wantError || ok != tt.ok || shard != tt.shard || slots != tt.slots {
			t.Errorf("%s: got shard %d, %d slots, %v, %v; want %d, %d, %v, error %v", tt.name, shard, slots, ok, err, tt.shard, tt.slots, tt.ok, tt.wantError)
		}
	}
}

// txKey is the key a transaction item writes.
func txKey(w types.TransactWriteItem) (string, string) {
	switch {
	case w.Update != nil:
		return str(w.Update.Key["pk"]), str(w.Update.Key["sk"])
	case w.Delete != nil:
		return str(w.Delete.Key["pk"]), str(w.Delete.Key["sk"])
	case w.Put != nil:
		return str(w.Put.Item["pk"]), str(w.Put.Item["sk"])
	}
	return "", ""
}

func txKeys(tx []types.TransactWriteItem) []string {
	var ks []string
	for _, w := range tx {
		pk, sk := txKey(w)
		kind := "update"
		switch {
		case w.Delete != nil:
			kind = "delete"
		case w.Put != nil:
			kind = "put"
		}
		ks = append(ks, kind+" "+pk+"/"+sk)
	}
	return ks
}

func TestPoolClaimItems(t *testing.T) {
	t.Parallel()
	s := &Store{Table: "relay"}
	entry := sched.Ready{Model: "gpt-4o", Tenant: "acme", Batch: "batch_1", Priority: 0, Seq: 4, Next: 2, Total: 5}
	lease := time.UnixMilli(1_700_000_060_000)
	moved := entry
	moved.Next, moved.Seq = 3, 5
	tests := []struct {
		name  string
		c     sched.Claim
		quota int
		want  []string
	}{
		{
			name: "slots from shard 1, the entry moves on", c: sched.Claim{Entry: entry, After: 3, Run: "run_1", Slots: 8, Shard: 1, Lease: lease}, quota: 100,
			want: []string{"update MODEL#gpt-4o/CAP#001", "update B#batch_1/CHUNK#000002", "delete READY#gpt-4o/" + entry.SK(), "put READY#gpt-4o/" + moved.SK()},
		},
		{
			name: "the batch's last chunk of the model: the entry goes", c: sched.Claim{Entry: entry, After: -1, Run: "run_1", Slots: 8, Lease: lease}, quota: 100,
			want: []string{"update MODEL#gpt-4o/CAP#000", "update B#batch_1/CHUNK#000002", "delete READY#gpt-4o/" + entry.SK()},
		},
		{
			name: "no slots: no capacity item", c: sched.Claim{Entry: entry, After: 3, Run: "run_1", Lease: lease}, quota: 100,
			want: []string{"update B#batch_1/CHUNK#000002", "delete READY#gpt-4o/" + entry.SK(), "put READY#gpt-4o/" + moved.SK()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx := s.poolClaimItems([]sched.Claim{tt.c}, tt.quota).items
			if got := txKeys(tx); !slices.Equal(got, tt.want) {
				t.Fatalf("items:\n%q\nwant\n%q", got, tt.want)
			}
			if tt.c.Slots > 0 {
				u := tx[0].Update
				if *u.ConditionExpression != "attribute_not_exists(inflight) OR inflight <= :room" ||
					num(u.ExpressionAttributeValues[":room"]) != strconv.Itoa(tt.quota-tt.c.Slots) || num(u.ExpressionAttributeValues[":n"]) != strconv.Itoa(tt.c.Slots) {
					t.Errorf("capacity update: %s %v", *u.ConditionExpression, u.ExpressionAttributeValues)
				}
				tx = tx[1:]
			}
			cu := tx[0].Update
			lpk, lsk := leaseAttrs("batch_1", 2, lease)
			v := cu.ExpressionAttributeValues
			if *cu.ConditionExpression != "#st = :pending" || str(v[":run"]) != "run_1" || num(v[":lease"]) != "1700000060000" ||
				str(v[":lpk"]) != str(lpk) || str(v[":lsk"]) != str(lsk) || num(v[":slots"]) != strconv.Itoa(tt.c.Slots) {
				t.Errorf("chunk claim: %s %v", *cu.ConditionExpression, v)
			}
			if len(tx) == 3 {
				var r sched.Ready
				if _, err := fromItem(tx[2].Put.Item, &r); err != nil || r != moved {
					t.Errorf("moved entry: got %+v, %v; want %+v", r, err, moved)
				}
			}
		})
	}
}

func TestCommitItems(t *testing.T) {
	t.Parallel()
	s := &Store{Table: "relay"}
	chunk := batch.Chunk{Batch: "batch_1", Tenant: "acme", Index: 2, Model: "gpt-4o", Run: "run_1", Attempt: "run_1",
		Pattern: "oe", OutBytes: 10, ErrBytes: 20, Slots: 8, Shard: 1}
	due := time.Unix(1_700_000_020, 0)
	next := &sched.Claim{Entry: sched.Ready{Model: "gpt-4o", Tenant: "acme", Batch: "batch_1", Seq: 1, Next: 3, Total: 5}, After: -1, Run: "run_1", Slots: 8, Shard: 1, Lease: due}
	tests := []struct {
		name string
		c    sched.Commit
		want []string
	}{
		{
			name: "not the last: the slots go back to the shard",
			c:    sched.Commit{Chunk: chunk, Completed: 1, Failed: 1, ChunksTotal: 5},
			want: []string{"update B#batch_1/CHUNK#000002", "update T#acme/BATCH#batch_1", "update MODEL#gpt-4o/CAP#001"},
		},
		{
			name: "the last, with usage of one model",
			c: sched.Commit{Chunk: chunk, Completed: 2, ChunksTotal: 5, Last: true, FinalizeDue: due, Day: "2024-05-01", KeyID: "k1",
				UsageByModel: map[string]sched.UsageAgg{"gpt-4o": {Requests: 2, Input: 10, Output: 5, Total: 15}}},
			want: []string{"update B#batch_1/CHUNK#000002", "update T#acme/BATCH#batch_1", "update USAGE#acme/2024-05-01#gpt-4o",
				"update USAGEBY#acme/2024-05-01#k1#batch_1#gpt-4o", "update MODEL#gpt-4o/CAP#001"},
		},
		{
			name: "slots handed on to the next chunk",
			c:    sched.Commit{Chunk: chunk, ChunksTotal: 5, Next: next},
			want: []string{"update B#batch_1/CHUNK#000002", "update T#acme/BATCH#batch_1", "update B#batch_1/CHUNK#000003", "delete READY#gpt-4o/" + next.Entry.SK()},
		},
		{
			name: "a chunk that held no slots",
			c:    sched.Commit{Chunk: batch.Chunk{Batch: "batch_1", Index: 0, Run: "r"}, ChunksTotal: 1, Last: true, FinalizeDue: due},
			want: []string{"update B#batch_1/CHUNK#000000", "update T#acme/BATCH#batch_1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx := s.commitItems("acme", tt.c).items
			if got := txKeys(tx); !slices.Equal(got, tt.want) {
				t.Fatalf("items:\n%q\nwant\n%q", got, tt.want)
			}
			cu := tx[0].Update
			if *cu.ConditionExpression != "#st = :claimed AND #run = :run" || str(cu.ExpressionAttributeValues[":run"]) != tt.c.Chunk.Run {
				t.Errorf("chunk condition: %s %v", *cu.ConditionExpression, cu.ExpressionAttributeValues[":run"])
			}
			nextAV := cu.ExpressionAttributeValues[":next"]
			if _, null := nextAV.(*types.AttributeValueMemberNULL); null != (tt.c.Next == nil) {
				t.Errorf(":next is %T with Next %v", nextAV, tt.c.Next)
			}
			bu := tx[1].Update
			v := bu.ExpressionAttributeValues
			if num(v[":c"]) != strconv.FormatInt(tt.c.Completed, 10) || num(v[":f"]) != strconv.FormatInt(tt.c.Failed, 10) {
				t.Errorf("counts: %v", v)
			}
			if tt.c.Last {
				if bu.ConditionExpression != nil || !strings.HasPrefix(*bu.UpdateExpression, "SET finalize_due = :finalize_due, gsi4pk = :gsi4pk, gsi4sk = :gsi4sk, counts.completed") ||
					num(v[":finalize_due"]) != "1700000020" || str(v[":gsi4pk"]) != "DUE" || str(v[":gsi4sk"]) != dueSK(due.Unix(), "acme", "batch_1") {
					t.Errorf("last commit's batch update: %s %v", *bu.UpdateExpression, v)
				}
			} else if bu.ConditionExpression == nil || *bu.ConditionExpression != "chunks_done < :lastbutone" || num(v[":lastbutone"]) != strconv.Itoa(tt.c.ChunksTotal-1) {
				t.Errorf("commit not last: condition %v %v", bu.ConditionExpression, v[":lastbutone"])
			}
			for _, w := range tx[2:] {
				u := w.Update
				if u == nil || !strings.HasPrefix(str(u.Key["pk"]), "USAGE#") {
					continue
				}
				// The item the update leaves behind reads as a UsageRow.
				uv := u.ExpressionAttributeValues
				stored := item{"pk": u.Key["pk"], "sk": u.Key["sk"], "day": uv[":day"], "model": uv[":m"], "requests": uv[":r"],
					"input_tokens": uv[":i"], "output_tokens": uv[":o"], "total_tokens": uv[":t"]}
				roundTrip(t, "usage", stored, UsageRow{Day: "2024-05-01", Model: "gpt-4o", Requests: 2, InputTokens: 10, OutputTokens: 5, TotalTokens: 15})
			}
			if last := tx[len(tx)-1].Update; last != nil && strings.HasPrefix(str(last.Key["pk"]), "MODEL#") &&
				num(last.ExpressionAttributeValues[":n"]) != strconv.Itoa(-tt.c.Chunk.Slots) {
				t.Errorf("slots given back: %v", last.ExpressionAttributeValues[":n"])
			}
		})
	}
}
