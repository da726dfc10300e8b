package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/jsonl"
)

// Plan's split of an input into chunks (Chunker, SplitInput), without S3 or
// DynamoDB: the input is a string and the normalized CSV a buffer.

const chat = "/v1/chat/completions"

func planOpts(format jsonl.Format) jsonl.Options {
	return jsonl.Options{Format: format, Endpoint: chat, Model: "m1", KnownModel: func(m string) bool { return m == "m1" || m == "m2" }}
}

func row(id, model string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":%q,"body":{"model":%q,"messages":[{"role":"user","content":"hi"}]}}`, id, chat, model)
}

func workflowRow(id string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":%q,"body":{"model":"m1","messages":[],"relay":{"workflow":{"url":"https://hooks.example.com/w"}}}}`, id, chat)
}

// rows is n rows of model m1, one a line, ids r0…r(n-1).
func rows(n int) string {
	var sb strings.Builder
	for i := range n {
		sb.WriteString(row(fmt.Sprintf("r%d", i), "m1") + "\n")
	}
	return sb.String()
}

func rowIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("r%d", i)
	}
	return out
}

// rowsOf is a Chunker's MaxRows of n rows for every model.
func rowsOf(n int) func(string) int { return func(string) int { return n } }

func split(t *testing.T, input string, format jsonl.Format, maxRows int, maxBytes int64) ([]batch.Chunk, []byte) {
	t.Helper()
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(maxRows), MaxBytes: maxBytes}
	var norm *bytes.Buffer
	var w io.Writer
	if format == jsonl.CSV {
		norm = &bytes.Buffer{}
		w = norm
	}
	res, err := SplitInput(strings.NewReader(input), planOpts(format), k, w)
	if err != nil {
		t.Fatalf("split: %v", err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("input invalid: %+v", res.Errors)
	}
	if format == jsonl.CSV {
		return k.Chunks, norm.Bytes()
	}
	return k.Chunks, []byte(input)
}

// fileBucket is a hand-written bucket holding one file: it reads ranges
// of it and counts the reads.
type fileBucket struct {
	file  []byte
	reads int
}

func (f *fileBucket) ReadRange(_ context.Context, _ []batch.Object, start, end int64) ([]byte, error) {
	f.reads++
	if start < 0 || end > int64(len(f.file)) || start > end {
		return nil, fmt.Errorf("range [%d,%d) of %d bytes", start, end, len(f.file))
	}
	return append([]byte(nil), f.file[start:end]...), nil
}

// checkChunks checks what the executor and the finalizer rely on: chunks
// are numbered in order, pending, of this batch, of one model each; their
// spans are in row order, apart and within the chunk's range; each chunk
// reads back (ReadChunk, as the executor does, one ranged GET) as exactly
// its rows, its i-th the input's row c.Row(i); together they hold every
// row once.
func checkChunks(t *testing.T, chunks []batch.Chunk, file []byte, wantIDs []string) {
	t.Helper()
	seen := make([]bool, len(wantIDs))
	for i, c := range chunks {
		if c.Index != i || c.Batch != "batch_1" || c.Tenant != "acme" || c.State != batch.ChunkPending || c.Rows < 1 || c.FirstRow != c.Row(0) {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		checkSpans(t, c)
		bucket := &fileBucket{file: file}
		reqs, err := ReadChunk(context.Background(), bucket, batch.Batch{}, c)
		if err != nil || len(reqs) != c.Rows || bucket.reads != 1 {
			t.Fatalf("chunk %d [%d,%d): %d requests in %d reads, %v; want %d in 1", i, c.Start, c.End, len(reqs), bucket.reads, err, c.Rows)
		}
		for j, r := range reqs {
			row := c.Row(j)
			if row < 0 || row >= len(wantIDs) || seen[row] || r.CustomID != wantIDs[row] {
				t.Fatalf("chunk %d row %d: %s at input row %d (seen %v), want %q", i, j, r.CustomID, row, row < len(seen) && seen[row], wantIDs[min(row, len(wantIDs)-1)])
			}
			seen[row] = true
			if !bytes.Contains(r.Body, []byte(fmt.Sprintf(`"model":%q`, c.Model))) {
				t.Errorf("chunk %d of model %s holds %s", i, c.Model, r.Body)
			}
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("input row %d is in no chunk", i)
	}
}

// checkSpans checks c's spans: none when its rows follow each other, else
// two or more in row order with rows between them, covering c's rows and
// its range from first to last byte.
func checkSpans(t *testing.T, c batch.Chunk) {
	t.Helper()
	if len(c.Spans) == 1 {
		t.Fatalf("chunk %d: one span stored, want none: %+v", c.Index, c.Spans)
	}
	runs, rows := c.Runs(), 0
	for j, s := range runs {
		rows += s.Rows
		if s.Rows < 1 || s.End <= s.Start {
			t.Fatalf("chunk %d span %d: %+v", c.Index, j, s)
		}
		if j > 0 && (s.Row <= runs[j-1].Row+runs[j-1].Rows || s.Start < runs[j-1].End) {
			t.Fatalf("chunk %d span %d %+v does not come after a gap from %+v", c.Index, j, s, runs[j-1])
		}
	}
	if rows != c.Rows || runs[0].Start != c.Start || runs[len(runs)-1].End != c.End || runs[0].Row != c.FirstRow {
		t.Fatalf("chunk %d: spans %+v hold %d rows, want %d in [%d,%d) from row %d", c.Index, runs, rows, c.Rows, c.Start, c.End, c.FirstRow)
	}
}

// contiguous says the chunks cover file from first to last byte.
func contiguous(t *testing.T, chunks []batch.Chunk, file []byte, from int64) {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatal("no chunks")
	}
	if chunks[0].Start != from || chunks[len(chunks)-1].End != int64(len(file)) {
		t.Errorf("chunks cover [%d,%d) of %d bytes, want from %d to the end", chunks[0].Start, chunks[len(chunks)-1].End, len(file), from)
	}
	for i := 1; i < len(chunks); i++ {
		if chunks[i].Start != chunks[i-1].End {
			t.Errorf("gap or overlap between chunks %d and %d: %d vs %d", i-1, i, chunks[i-1].End, chunks[i].Start)
		}
	}
}

func TestSplitByRows(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ n, maxRows int }{
		{1, 1}, {1, 512}, {5, 1}, {5, 2}, {6, 3}, {7, 3}, {511, 512}, {512, 512}, {513, 512}, {1025, 512}, {1000, 7},
	} {
		t.Run(fmt.Sprintf("%d rows by %d", tt.n, tt.maxRows), func(t *testing.T) {
			t.Parallel()
			input := rows(tt.n)
			chunks, file := split(t, input, jsonl.JSONL, tt.maxRows, 1<<40)
			if want := (tt.n + tt.maxRows - 1) / tt.maxRows; len(chunks) != want {
				t.Fatalf("%d chunks, want ceil(%d/%d) = %d", len(chunks), tt.n, tt.maxRows, want)
			}
			for i, c := range chunks {
				if want := min(tt.maxRows, tt.n-i*tt.maxRows); c.Rows != want {
					t.Errorf("chunk %d: %d rows, want %d", i, c.Rows, want)
				}
			}
			checkChunks(t, chunks, file, rowIDs(tt.n))
			contiguous(t, chunks, file, 0)
		})
	}
}

func TestSplitByBytes(t *testing.T) {
	t.Parallel()
	line := int64(len(row("r0", "m1")) + 1) // every id r0…r9 has the same length
	tests := []struct {
		name        string
		maxBytes    int64
		wantPerFull int
	}{
		{"one row fits exactly", line, 1},
		{"one row and a byte", line + 1, 1},
		{"three rows exactly", 3 * line, 3},
		{"three rows and a bit", 4*line - 1, 3},
		{"a row over the limit is alone", line / 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, file := split(t, rows(10), jsonl.JSONL, 512, tt.maxBytes)
			for i, c := range chunks {
				if c.Rows > 1 && c.End-c.Start > tt.maxBytes {
					t.Errorf("chunk %d: %d bytes, over %d", i, c.End-c.Start, tt.maxBytes)
				}
				if i < len(chunks)-1 && c.Rows != tt.wantPerFull {
					t.Errorf("chunk %d: %d rows, want %d", i, c.Rows, tt.wantPerFull)
				}
			}
			if want := (10 + tt.wantPerFull - 1) / tt.wantPerFull; len(chunks) != want {
				t.Errorf("%d chunks, want %d", len(chunks), want)
			}
			checkChunks(t, chunks, file, rowIDs(10))
			contiguous(t, chunks, file, 0)
		})
	}
}

func TestSplitBoundaries(t *testing.T) {
	t.Parallel()
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	tests := []struct {
		name      string
		input     string
		maxRows   int
		wantRows  []int
		wantSpans []int // spans per chunk (Runs)
		wantIDs   []string
	}{
		{
			name:     "the model changes and changes back",
			input:    lines(row("a", "m1"), row("b", "m1"), row("c", "m2"), row("d", "m1"), row("e", "m1")),
			maxRows:  10,
			wantRows: []int{4, 1}, wantSpans: []int{2, 1}, wantIDs: []string{"a", "b", "c", "d", "e"},
		},
		{
			name:     "models alternate",
			input:    lines(row("a", "m1"), row("b", "m2"), row("c", "m1"), row("d", "m2"), row("e", "m1"), row("f", "m2"), row("g", "m1"), row("h", "m2"), row("i", "m1"), row("j", "m2")),
			maxRows:  3,
			wantRows: []int{3, 3, 2, 2}, wantSpans: []int{3, 3, 2, 2}, wantIDs: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
		},
		{
			name:     "a workflow record alone",
			input:    lines(row("a", "m1"), row("b", "m1"), workflowRow("w"), row("c", "m1"), row("d", "m1")),
			maxRows:  10,
			wantRows: []int{4, 1}, wantSpans: []int{2, 1}, wantIDs: []string{"a", "b", "w", "c", "d"},
		},
		{
			name:     "workflow records one after another",
			input:    lines(workflowRow("w1"), workflowRow("w2"), row("a", "m1")),
			maxRows:  10,
			wantRows: []int{1, 1, 1}, wantSpans: []int{1, 1, 1}, wantIDs: []string{"w1", "w2", "a"},
		},
		{
			name:     "rows and models",
			input:    lines(row("a", "m1"), row("b", "m1"), row("c", "m1"), row("d", "m2"), row("e", "m2"), row("f", "m2")),
			maxRows:  2,
			wantRows: []int{2, 1, 2, 1}, wantSpans: []int{1, 1, 1, 1}, wantIDs: []string{"a", "b", "c", "d", "e", "f"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, file := split(t, tt.input, jsonl.JSONL, tt.maxRows, 1<<40)
			var rows, spans []int
			for _, c := range chunks {
				rows, spans = append(rows, c.Rows), append(spans, len(c.Runs()))
			}
			if !slices.Equal(rows, tt.wantRows) || !slices.Equal(spans, tt.wantSpans) {
				t.Fatalf("rows per chunk %v, spans %v; want %v, %v", rows, spans, tt.wantRows, tt.wantSpans)
			}
			checkChunks(t, chunks, file, tt.wantIDs)
		})
	}
}

// mixed is an input of n rows of m1 and n/2 of m2, interleaved m1, m1, m2
// (the 1,200 + 600), and the rows' ids.
func mixed(n int) (string, []string) {
	var sb strings.Builder
	var ids []string
	for i := range n + n/2 {
		m := "m1"
		if i%3 == 2 {
			m = "m2"
		}
		id := fmt.Sprintf("r%d", i)
		sb.WriteString(row(id, m) + "\n")
		ids = append(ids, id)
	}
	return sb.String(), ids
}

// A batch whose rows alternate models is cut by model: each model's rows
// fill chunks of its own row limit, however they interleave, not a chunk
// at every change of model.
func TestSplitByModel(t *testing.T) {
	t.Parallel()
	input, ids := mixed(1200)
	limit := map[string]int{"m1": 96, "m2": 48} // capacities 6 and 3 (Limits.RowsFor)
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: func(m string) int { return limit[m] }, MaxBytes: 4 << 20}
	if _, err := SplitInput(strings.NewReader(input), planOpts(jsonl.JSONL), k, nil); err != nil {
		t.Fatal(err)
	}
	if want := (1200+95)/96 + (600+47)/48; len(k.Chunks) != want { // 13 of m1, 13 of m2
		t.Fatalf("%d chunks, want %d", len(k.Chunks), want)
	}
	perModel := map[string]int{}
	for _, c := range k.Chunks {
		perModel[c.Model] += c.Rows
		if c.Rows > limit[c.Model] {
			t.Errorf("chunk %d of %s: %d rows, over %d", c.Index, c.Model, c.Rows, limit[c.Model])
		}
	}
	if perModel["m1"] != 1200 || perModel["m2"] != 600 {
		t.Fatalf("rows per model %v", perModel)
	}
	checkChunks(t, k.Chunks, []byte(input), ids)
}

// A chunk's bytes from its first row to its last stay within MaxBytes, the
// other models' rows between its spans included: a model's rows spread
// thin get smaller chunks, never a read over the bound.
func TestSplitEnvelope(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	var ids []string
	for i := range 300 {
		m := "m1"
		if i%25 == 0 {
			m = "m2" // a rare model: a row every 25
		}
		id := fmt.Sprintf("r%03d", i)
		sb.WriteString(row(id, m) + "\n")
		ids = append(ids, id)
	}
	line := int64(len(row("r000", "m1")) + 1)
	for _, tt := range []struct {
		name         string
		maxBytes     int64
		wantM2Chunks int
	}{
		{"the rare rows fit together", 300 * line, 1},
		{"two rare rows a chunk", 26 * line, 6},
		{"each rare row alone", 25 * line, 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(512), MaxBytes: tt.maxBytes}
			if res, err := SplitInput(strings.NewReader(sb.String()), planOpts(jsonl.JSONL), k, nil); err != nil || len(res.Errors) > 0 {
				t.Fatal(err, res.Errors)
				t.Fatal(err)
			}
			m2 := 0
			for _, c := range k.Chunks {
				if c.End-c.Start > tt.maxBytes {
					t.Errorf("chunk %d of %s: %d bytes from first row to last, over %d", c.Index, c.Model, c.End-c.Start, tt.maxBytes)
				}
				if c.Model == "m2" {
					m2++
				}
			}
			if m2 != tt.wantM2Chunks {
				t.Errorf("%d chunks of m2, want %d", m2, tt.wantM2Chunks)
			}
			checkChunks(t, k.Chunks, []byte(sb.String()), ids)
		})
	}
}

func TestRowsFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lim      Limits
		capacity int
		want     int
	}{
		{Limits{}, 8, 192},
		{Limits{}, 6, 144},
		{Limits{}, 1, 24},
		{Limits{}, 21, 504},
		{Limits{}, 22, 528},
		{Limits{}, 32, 768},
		{Limits{}, 64, 768},
		{Limits{}, 10_000, 768},
		{Limits{}, 0, 768},
		{Limits{Rows: 100}, 8, 100},
		{Limits{Slots: 4}, 64, 96},
		{Limits{Rows: 1}, 8, 1},
	} {
		if got := tt.lim.OrDefaults().RowsFor(tt.capacity); got != tt.want {
			t.Errorf("%+v.RowsFor(%d) = %d, want %d", tt.lim, tt.capacity, got, tt.want)
		}
	}
}

// A claim takes more than 32 slots only on a model whose capacity an
// invocation's chunks of 32 would not cover, and never so many that a
// chunk makes fewer than MinRounds round trips.
func TestSlotsFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lim              Limits
		capacity, chunks int
		want             int
	}{
		{Limits{}, 8, 10, 32},
		{Limits{}, 320, 10, 32},
		{Limits{}, 321, 10, 33},
		{Limits{}, 512, 10, 52},
		{Limits{}, 640, 10, 64},
		{Limits{}, 10_000, 10, 64},
		{Limits{}, 512, 4, 64},
		{Limits{Rows: 100}, 10_000, 10, 32},
		{Limits{Rows: 10}, 10_000, 10, 10},
		{Limits{Slots: 4}, 512, 10, 52},
	} {
		if got := tt.lim.OrDefaults().SlotsFor(tt.capacity, tt.chunks); got != tt.want {
			t.Errorf("%+v.SlotsFor(%d, %d) = %d, want %d", tt.lim, tt.capacity, tt.chunks, got, tt.want)
		}
	}
}

// Blank lines, CRLF, a byte order mark and a last line without its line
// break change the ranges, never what they read back as.
func TestSplitRanges(t *testing.T) {
	t.Parallel()
	a, b, c := row("a", "m1"), row("b", "m1"), row("c", "m1")
	tests := []struct {
		name       string
		input      string
		maxRows    int
		contiguous bool
		from       int64
	}{
		{"no final line break", a + "\n" + b + "\n" + c, 2, true, 0},
		{"CRLF", a + "\r\n" + b + "\r\n" + c + "\r\n", 2, true, 0},
		{"byte order mark", "\ufeff" + a + "\n" + b + "\n" + c + "\n", 2, true, 3},
		{"blank lines", "\n" + a + "\n\n\n" + b + "\n  \n" + c + "\n\n", 1, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, file := split(t, tt.input, jsonl.JSONL, tt.maxRows, 1<<40)
			checkChunks(t, chunks, file, []string{"a", "b", "c"})
			if tt.contiguous {
				contiguous(t, chunks, file, tt.from)
			}
		})
	}
}

// A CSV input's rows are written as JSONL lines; the chunks are ranges of
// those lines, which cover them end to end, whatever the CSV's header.
func TestSplitCSV(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		input   string
		maxRows int
		wantIDs []string
	}{
		{"header prompt", "prompt\nhello\nworld\n", 10, []string{"row-1", "row-2"}},
		{"header in another case", "Prompt\nhello\nworld\n", 10, []string{"row-1", "row-2"}},
		{"no header", "hello\nworld\nagain\n", 10, []string{"row-1", "row-2", "row-3"}},
		{"custom ids", "custom_id,prompt\na,hi\nb,\"there, you\"\n", 10, []string{"a", "b"}},
		{"blank lines and CRLF", "prompt\r\nhello\r\n\r\nworld\r\n", 10, []string{"row-1", "row-2"}},
		{"a chunk a row", "prompt\none\ntwo\nthree\n", 1, []string{"row-1", "row-2", "row-3"}},
		{"byte order mark", "\ufeffprompt\nhello\n", 10, []string{"row-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, norm := split(t, tt.input, jsonl.CSV, tt.maxRows, 1<<40)
			if want := (len(tt.wantIDs) + tt.maxRows - 1) / tt.maxRows; len(chunks) != want {
				t.Fatalf("%d chunks, want %d", len(chunks), want)
			}
			if n := bytes.Count(norm, []byte("\n")); n != len(tt.wantIDs) {
				t.Fatalf("normalized input has %d lines, want %d: %s", n, len(tt.wantIDs), norm)
			}
			checkChunks(t, chunks, norm, tt.wantIDs)
			contiguous(t, chunks, norm, 0)
			for _, c := range chunks {
				if c.Model != "m1" {
					t.Errorf("chunk %d: model %q, want the batch's m1", c.Index, c.Model)
				}
			}
		})
	}
}

// An invalid input is reported in the result (Plan then fails the batch
// and drops the chunks); a failed write of the normalized CSV is an error.
func TestSplitInputFailures(t *testing.T) {
	t.Parallel()
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(10), MaxBytes: 1 << 40}
	res, err := SplitInput(strings.NewReader(row("a", "m1")+"\nnot json\n"+row("b", "nope")+"\n"), planOpts(jsonl.JSONL), k, nil)
	if err != nil || len(res.Errors) != 2 {
		t.Fatalf("invalid rows: %v, errors %+v", err, res.Errors)
	}
	k = &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(10), MaxBytes: 1 << 40}
	res, err = SplitInput(strings.NewReader("prompt\n"), planOpts(jsonl.CSV), k, &bytes.Buffer{})
	if err != nil || len(res.Errors) != 1 || res.Errors[0].Code != jsonl.CodeEmptyFile || len(k.Chunks) != 0 {
		t.Fatalf("header only: %v, errors %+v, chunks %d", err, res.Errors, len(k.Chunks))
	}
	broken := errors.New("disk full")
	k = &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(10), MaxBytes: 1 << 40}
	if _, err := SplitInput(strings.NewReader("hello\n"), planOpts(jsonl.CSV), k, failingWriter{broken}); !errors.Is(err, broken) {
		t.Fatalf("write failure: got %v", err)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

func TestLinkChunks(t *testing.T) {
	t.Parallel()
	models := []string{"a", "a", "b", "a", "b"}
	chunks := make([]batch.Chunk, len(models))
	for i, m := range models {
		chunks[i] = batch.Chunk{Batch: "x", Tenant: "t", Index: i, Model: m}
	}
	entries := LinkChunks(chunks, 3)
	wantNext := []int{1, 3, 4, -1, -1}
	for i, c := range chunks {
		if c.NextSame != wantNext[i] {
			t.Errorf("chunk %d: NextSame %d, want %d", i, c.NextSame, wantNext[i])
		}
	}
	if len(entries) != 2 || entries[0].Model != "a" || entries[0].Total != 5 || entries[0].Next != 0 || entries[1].Model != "b" || entries[1].Next != 2 ||
		!entries[0].Mixed || entries[0].Priority != 3 {
		t.Fatalf("entries: got %+v", entries)
	}
	single := LinkChunks([]batch.Chunk{{Model: "a"}, {Model: "a", Index: 1}}, 0)
	if len(single) != 1 || single[0].Mixed {
		t.Fatalf("single-model entries: got %+v", single)
	}
}

// Rows NoCall refuses go to chunks of their own, marked NoCall, apart from
// their model's other rows; those chunks get no ready entry and no chunk
// steps to them, and a batch of one model with such a chunk is Mixed (its
// entry must read each chunk's NextSame, not step to the next index).
func TestSplitNoCallRows(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	for i := range 6 {
		content := "hi"
		if i%2 == 1 {
			content = "refuse"
		}
		fmt.Fprintf(&sb, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[{"role":"user","content":%q}]}}`+"\n", i, content)
	}
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(2), MaxBytes: 4 << 20,
		NoCall: func(r jsonl.Row) bool { return bytes.Contains(r.Body, []byte("refuse")) }}
	if res, err := SplitInput(strings.NewReader(sb.String()), planOpts(jsonl.JSONL), k, nil); err != nil || len(res.Errors) > 0 {
		t.Fatal(err, res.Errors)
	}
	var got []string
	for _, c := range k.Chunks {
		got = append(got, fmt.Sprintf("%d:%d+%d:%v", c.Index, c.FirstRow, c.Rows, c.NoCall))
	}
	if want := "0:0+2:false 1:1+2:true 2:4+1:false 3:5+1:true"; strings.Join(got, " ") != want {
		t.Fatalf("chunks (index:first+rows:nocall) %q, want %q", strings.Join(got, " "), want)
	}
	entries := LinkChunks(k.Chunks, 0)
	if len(entries) != 1 || entries[0].Next != 0 || !entries[0].Mixed {
		t.Fatalf("entries %+v, want one at chunk 0, mixed", entries)
	}
	for i, want := range []int{2, -1, -1, -1} {
		if k.Chunks[i].NextSame != want {
			t.Errorf("chunk %d: NextSame %d, want %d", i, k.Chunks[i].NextSame, want)
		}
	}
	if alone := Alone(k.Chunks); len(alone) != 2 || alone[0].Index != 1 || alone[1].Index != 3 {
		t.Errorf("alone: %+v, want the NoCall chunks 1 and 3", alone)
	}
}

// A workflow record the plan refuses is in no chain: its model's entry
// steps over it by NextSame, even in a batch of one model, and it is
// started alone.
func TestInvalidRecordRunsAlone(t *testing.T) {
	t.Parallel()
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(2), MaxBytes: 1 << 40,
		ValidRecord: func(row []byte) bool { return !bytes.Contains(row, []byte(`"bad"`)) }}
	input := strings.Join([]string{row("a", "m1"), workflowRow("bad"), row("b", "m1"), row("c", "m1"), workflowRow("good")}, "\n") + "\n"
	if _, err := SplitInput(strings.NewReader(input), planOpts(jsonl.JSONL), k, nil); err != nil {
		t.Fatal(err)
	}
	entries := LinkChunks(k.Chunks, 0)
	var invalid, next []string
	for _, c := range k.Chunks {
		invalid = append(invalid, fmt.Sprint(c.Invalid))
		next = append(next, fmt.Sprint(c.NextSame))
	}
	// Chunks: 0 {a,b}, 1 bad, 2 {c}, 3 good.
	if got, want := strings.Join(invalid, " "), "false true false false"; got != want {
		t.Fatalf("invalid: got %s, want %s", got, want)
	}
	if got, want := strings.Join(next, " "), "2 -1 3 -1"; got != want {
		t.Fatalf("NextSame: got %s, want %s", got, want)
	}
	if len(entries) != 1 || entries[0].Next != 0 || !entries[0].Mixed {
		t.Fatalf("entries: got %+v, want one at chunk 0 stepping by NextSame", entries)
	}
	if alone := Alone(k.Chunks); len(alone) != 1 || alone[0].Index != 1 {
		t.Fatalf("alone: got %+v, want chunk 1", alone)
	}
}

// rowsPerChunk is the rows of each of chunks of model, in index order.
func rowsPerChunk(chunks []batch.Chunk, model string) []int {
	var n []int
	for _, c := range chunks {
		if c.Model == model {
			n = append(n, c.Rows)
		}
	}
	return n
}

// A model's last round of chunks, the chunks its count leaves over a
// multiple of its lanes (claims of its capacity at once), is cut anew
// into as many chunks as lanes, each at least a round of a claim's slots:
// no lane runs a whole chunk while the others idle (docs/design.md
// "Chunks"). A model of one lane, and rows of fewer than a claim's slots,
// keep their chunks.
func TestSplitLastRoundOnEveryLane(t *testing.T) {
	t.Parallel()
	lanes := func(lanes, slots int) func(string) (int, int) {
		return func(string) (int, int) { return lanes, slots }
	}
	for _, tt := range []struct {
		name         string
		rows         int
		lanes, slots int
		want         []int
	}{
		// 10 chunks of 24 on 4 lanes: the 9th and 10th (24 + 6 rows) become 4.
		{"tail", 222, 4, 8, []int{24, 24, 24, 24, 24, 24, 24, 24, 8, 8, 8, 6}},
		{"whole rounds", 192, 4, 8, []int{24, 24, 24, 24, 24, 24, 24, 24}},
		{"one chunk", 20, 4, 8, []int{7, 7, 6}},
		{"fewer rows than slots", 8, 4, 8, []int{8}},
		{"one lane", 30, 1, 8, []int{24, 6}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			input := rows(tt.rows)
			k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: rowsOf(24), MaxBytes: 4 << 20, Lanes: lanes(tt.lanes, tt.slots),
				Cost: func(jsonl.Row) float64 { return 1 }}
			if _, err := SplitInput(strings.NewReader(input), planOpts(jsonl.JSONL), k, nil); err != nil {
				t.Fatal(err)
			}
			if got := rowsPerChunk(k.Chunks, "m1"); !slices.Equal(got, tt.want) {
				t.Fatalf("rows per chunk %v, want %v", got, tt.want)
			}
			for _, c := range k.Chunks {
				if c.MostCost != float64(c.Rows) {
					t.Errorf("chunk %d: most cost %v for %d rows", c.Index, c.MostCost, c.Rows)
				}
			}
			checkChunks(t, k.Chunks, []byte(input), rowIDs(tt.rows))
		})
	}
}

// In a batch mixing models each model's last round is cut by its own
// lanes, the chunks renumbered in order, each model's rows still in
// input order along its chain.
func TestSplitLastRoundByModel(t *testing.T) {
	t.Parallel()
	input, ids := mixed(1200) // 1200 rows of m1, 600 of m2
	limit := map[string]int{"m1": 96, "m2": 48}
	lanes := map[string]int{"m1": 4, "m2": 1}
	k := &Chunker{Batch: "batch_1", Tenant: "acme", MaxRows: func(m string) int { return limit[m] }, MaxBytes: 4 << 20,
		Lanes: func(m string) (int, int) { return lanes[m], 4 }}
	if _, err := SplitInput(strings.NewReader(input), planOpts(jsonl.JSONL), k, nil); err != nil {
		t.Fatal(err)
	}
	// m1: 13 chunks (12 of 96, one of 48) on 4 lanes: the 13th's 48 rows become 4 of 12.
	wantM1 := append(slices.Repeat([]int{96}, 12), 12, 12, 12, 12)
	if got := rowsPerChunk(k.Chunks, "m1"); !slices.Equal(got, wantM1) {
		t.Fatalf("m1: rows per chunk %v, want %v", got, wantM1)
	}
	// m2, of one lane: 12 of 48 and one of 24, as before.
	if got, want := rowsPerChunk(k.Chunks, "m2"), append(slices.Repeat([]int{48}, 12), 24); !slices.Equal(got, want) {
		t.Fatalf("m2: rows per chunk %v, want %v", got, want)
	}
	checkChunks(t, k.Chunks, []byte(input), ids)
	for _, m := range []string{"m1", "m2"} {
		last := -1
		for _, c := range k.Chunks {
			if c.Model == m && c.FirstRow < last {
				t.Fatalf("%s: chunk %d starts at row %d, before the chunk before it (%d)", m, c.Index, c.FirstRow, last)
			}
			if c.Model == m {
				last = c.FirstRow
			}
		}
	}
}

// A model's lanes are the claims of a claim's slots its capacity holds at
// once: a model of fewer slots than a claim has one.
func TestLanesFor(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lim                 Limits
		capacity            int
		wantLanes, wantSlot int
	}{
		{Limits{}, 256, 8, 32},
		{Limits{}, 512, 9, 52}, // larger claims on a model 10 claims of 32 do not cover (SlotsFor)
		{Limits{}, 64, 2, 32},
		{Limits{}, 100, 3, 32},
		{Limits{}, 8, 1, 8},
		{Limits{}, 0, 1, 32},
		{Limits{Slots: 4}, 64, 9, 7}, // 10 claims of 4 do not cover 64: a claim takes 7 (SlotsFor)
	} {
		if n, slots := tt.lim.OrDefaults().LanesFor(tt.capacity); n != tt.wantLanes || slots != tt.wantSlot {
			t.Errorf("%+v.LanesFor(%d) = %d, %d; want %d, %d", tt.lim, tt.capacity, n, slots, tt.wantLanes, tt.wantSlot)
		}
	}
}
