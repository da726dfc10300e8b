package part

import (
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/batch"
)

// The output and error files are made of the parts the chunks committed, in
// chunk order, skipping empty ones; every committed part is kept.
func TestCommitted(t *testing.T) {
	t.Parallel()
	done := func(i int, attempt string, out, errb int64) batch.Chunk {
		return batch.Chunk{Tenant: "t", Batch: "batch_x", Index: i, Attempt: attempt, State: batch.ChunkDone, OutBytes: out, ErrBytes: errb}
	}
	chunks := []batch.Chunk{done(0, "a", 10, 0), done(1, "b", 0, 5), done(2, "c", 7, 3)}
	p, err := Committed("batch_x", chunks)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{chunks[0].Parts("out"), chunks[2].Parts("out")}; !slices.Equal(p.Out, want) || p.OutBytes != 17 {
		t.Fatalf("output file: %v (%d bytes), want %v (17)", p.Out, p.OutBytes, want)
	}
	if want := []string{chunks[1].Parts("err"), chunks[2].Parts("err")}; !slices.Equal(p.Err, want) || p.ErrBytes != 8 {
		t.Fatalf("error file: %v (%d bytes), want %v (8)", p.Err, p.ErrBytes, want)
	}
	if len(p.Keep) != 9 || !p.Keep[chunks[1].Parts("usage")] || p.Keep[batch.PartKey("t", "batch_x", 1, "lost", "out")] {
		t.Fatalf("keep: %v", p.Keep)
	}
	chunks[1].State = batch.ChunkClaimed
	if _, err := Committed("batch_x", chunks); err == nil {
		t.Fatal("a chunk not done: want an error")
	}
}

func TestOutputFile(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string][2]string{
		"output": {"file-abc-output", "batch_abc_output.jsonl"},
		"error":  {"file-abc-errors", "batch_abc_error.jsonl"},
	} {
		if id, name := OutputFile("batch_abc", kind); id != want[0] || name != want[1] {
			t.Errorf("%s: %s %s, want %v", kind, id, name, want)
		}
	}
}

func TestRecordsExpireWithPartsOrSooner(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	p := Files{Out: []string{"a.out"}, OutBytes: 7}
	hour, month := int64(3600), int64(30*24*3600)
	tests := []struct {
		name  string
		after *int64
		want  int64
		parts time.Duration
	}{
		// 30 days from the file's creation; parts that go sooner (written
		// as early as the batch's creation: KeptUntil) bound it.
		{"30 days", nil, now.Unix() + 30*24*3600, 32 * 24 * time.Hour},
		{"with its parts", nil, now.Unix() - 7200 + 30*24*3600, 30 * 24 * time.Hour},
		{"output_expires_after", &hour, now.Unix() + hour, 32 * 24 * time.Hour},
		{"30 days of output_expires_after", &month, now.Unix() + month, 32 * 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exp := now.Unix() + 86400 - 7200
			rs := p.Records(batch.Batch{ID: "batch_abc", Tenant: "t", CreatedAt: now.Unix() - 7200, ExpiresAt: &exp, OutputExpiresAfter: tt.after}, now, tt.parts)
			out, errs := rs[0], rs[1]
			if errs != nil || out == nil {
				t.Fatalf("got %+v, %+v; want an output file only", out, errs)
			}
			if out.ID != "file-abc-output" || out.Bytes != 7 || *out.ExpiresAt != tt.want || out.Tenant != "t" || out.Objects[0] != "a.out" {
				t.Fatalf("got %+v (expires %d), want expiry %d", out, *out.ExpiresAt, tt.want)
			}
		})
	}
}
