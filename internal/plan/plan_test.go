package plan

import (
	"bytes"
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

// checkChunks checks what the executor and the finalizer rely on: chunks
// are numbered in order, pending, of this batch; their rows follow each
// other; each range of file reads back (jsonl.ParseRequests, as the
// executor does) as exactly its rows, of its one model.
func checkChunks(t *testing.T, chunks []batch.Chunk, file []byte, wantIDs []string) {
	t.Helper()
	var got []string
	first := 0
	for i, c := range chunks {
		if c.Index != i || c.Batch != "batch_1" || c.Tenant != "acme" || c.State != batch.ChunkPending || c.FirstRow != first || c.Rows < 1 {
			t.Fatalf("chunk %d: %+v (first row want %d)", i, c, first)
		}
		if i > 0 && c.Start < chunks[i-1].End {
			t.Fatalf("chunk %d starts at %d, inside chunk %d (ends %d)", i, c.Start, i-1, chunks[i-1].End)
		}
		reqs, err := jsonl.ParseRequests(file[c.Start:c.End])
		if err != nil || len(reqs) != c.Rows {
			t.Fatalf("chunk %d [%d,%d): %d requests, %v; want %d", i, c.Start, c.End, len(reqs), err, c.Rows)
		}
		for _, r := range reqs {
			got = append(got, r.CustomID)
			if !bytes.Contains(r.Body, []byte(fmt.Sprintf(`"model":%q`, c.Model))) {
				t.Errorf("chunk %d of model %s holds %s", i, c.Model, r.Body)
			}
		}
		first += c.Rows
	}
	if !slices.Equal(got, wantIDs) {
		t.Fatalf("rows in chunk order: %q, want %q", got, wantIDs)
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
		name     string
		input    string
		maxRows  int
		wantRows []int
		wantIDs  []string
	}{
		{
			name:     "the model changes",
			input:    lines(row("a", "m1"), row("b", "m1"), row("c", "m2"), row("d", "m1"), row("e", "m1")),
			maxRows:  10,
			wantRows: []int{2, 1, 2}, wantIDs: []string{"a", "b", "c", "d", "e"},
		},
		{
			name:     "a workflow record alone",
			input:    lines(row("a", "m1"), row("b", "m1"), workflowRow("w"), row("c", "m1"), row("d", "m1")),
			maxRows:  10,
			wantRows: []int{2, 1, 2}, wantIDs: []string{"a", "b", "w", "c", "d"},
		},
		{
			name:     "workflow records one after another",
			input:    lines(workflowRow("w1"), workflowRow("w2"), row("a", "m1")),
			maxRows:  10,
			wantRows: []int{1, 1, 1}, wantIDs: []string{"w1", "w2", "a"},
		},
		{
			name:     "rows and models",
			input:    lines(row("a", "m1"), row("b", "m1"), row("c", "m1"), row("d", "m2"), row("e", "m2"), row("f", "m2")),
			maxRows:  2,
			wantRows: []int{2, 1, 2, 1}, wantIDs: []string{"a", "b", "c", "d", "e", "f"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			chunks, file := split(t, tt.input, jsonl.JSONL, tt.maxRows, 1<<40)
			var got []int
			for _, c := range chunks {
				got = append(got, c.Rows)
			}
			if !slices.Equal(got, tt.wantRows) {
				t.Fatalf("rows per chunk %v, want %v", got, tt.wantRows)
			}
			checkChunks(t, chunks, file, tt.wantIDs)
			contiguous(t, chunks, file, 0)
		})
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
