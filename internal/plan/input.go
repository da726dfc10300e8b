package plan

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/endpoint"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/resources"
)

// Blobs is what reading a batch's input needs of the bucket
// (internal/blob).
type Blobs interface {
	batch.Putter
	Concat(ctx context.Context, keys []string) io.ReadCloser
	Head(ctx context.Context, key string) (size int64, etag string, err error)
}

// Invalid is the errors of an input that cannot be planned: the batch
// fails with them, line-numbered, before any upstream call.
type Invalid []jsonl.LineError

func (v Invalid) Error() string { return fmt.Sprintf("invalid input: %d errors", len(v)) }

// maxInputObjects bounds the objects (upload parts) of an input file a plan
// takes: each costs a request while planning and room in the batch's record
// (400 KB at most), so a file of thousands of tiny parts would never plan.
const maxInputObjects = 1000

// Limits bound a chunk: Rows rows (RELAY_CHUNK_ROWS) and Bytes bytes of
// input (see Chunker); a claimed chunk holds Slots of its model's
// max_concurrency (more on a large model: SlotsFor), so that many of its
// rows run at once. The defaults are
// sized in docs/design.md "Chunk size" and "Hot items".
type Limits struct {
	Rows  int
	Bytes int64
	Slots int
}

// OrDefaults fills what l leaves zero: config.DefaultChunkRows rows, 4
// MiB, 32 slots, never more slots than rows to use them.
func (l Limits) OrDefaults() Limits {
	l.Rows, l.Bytes = cmp.Or(l.Rows, config.DefaultChunkRows), cmp.Or(l.Bytes, 4<<20)
	l.Slots = min(cmp.Or(l.Slots, 32), l.Rows)
	return l
}

// RoundTrips is the upstream round trips a chunk's rows make on the slots
// it holds: a bounded number, so fairness and priority act within about
// one chunk's run time even on a model of few slots, while a model of 32
// slots or more gets chunks of 768 rows and the AWS requests per 1,000
// rows stay below 20 (docs/design.md "Chunk size").
const RoundTrips = 24

// MinRounds is the fewest upstream round trips a chunk of l.Rows rows
// makes on the slots a claim takes (SlotsFor): half of RoundTrips, so a
// model's slots idle for a hand-over at most once in that many rounds.
const MinRounds = RoundTrips / 2

// SlotsFor is the most slots a claim of a chunk of a model of capacity
// takes when an executor invocation runs up to chunks chunks: l.Slots, or,
// on a model whose capacity that many claims of l.Slots would not cover,
// the share of it that does (so one invocation may hold all of it, at the
// GB-seconds of one), as long as a chunk of l.Rows rows still makes
// MinRounds round trips on them (docs/design.md "Chunk size").
func (l Limits) SlotsFor(capacity, chunks int) int {
	share := (capacity + chunks - 1) / max(chunks, 1)
	return max(l.Slots, min(share, l.Rows/MinRounds))
}

// RowsFor is the row limit of a chunk of a model of max_concurrency
// capacity (l with its defaults): RoundTrips rounds of the slots its claim
// takes, at most l.Rows. A capacity of 0 is not known: l.Rows.
func (l Limits) RowsFor(capacity int) int {
	slots := l.Slots
	if capacity > 0 {
		slots = min(slots, capacity)
	}
	return max(1, min(l.Rows, RoundTrips*slots))
}

// LanesFor is how many full claims of a model of capacity run at once,
// and the slots each takes (l with its defaults, SlotsFor an invocation of
// resources.WorkBatch chunks): the lanes its chunks run on side by side,
// whose last round Chunker spreads over them all (docs/design.md
// "Chunks"). A capacity of 0 is not known: one lane.
func (l Limits) LanesFor(capacity int) (lanes, slots int) {
	slots = l.SlotsFor(capacity, resources.WorkBatch)
	if capacity > 0 {
		slots = min(slots, capacity)
	}
	return max(1, capacity/slots), slots
}

// Input is the plan of a batch's valid input.
type Input struct {
	Result jsonl.Result
	Chunks []batch.Chunk
	// Objects are the objects the chunks are byte ranges of: a CSV input,
	// or any input of a batch with a model, rewritten as normalized JSONL
	// (so every executor reads one format), else the input file's own.
	Objects []batch.Object
}

// Models is what Scan checks each row's model against.
type Models struct {
	Known   func(string) bool // whether a model is configured
	Allowed func(string) bool // if set, whether the batch's key may use it
	// Default is the model a row naming none gets (endpoint.DefaultModel;
	// "": such a row is invalid).
	Default string
	// NoCall, if set, says whether a valid row is refused without an
	// upstream call: it goes to a NoCall chunk (Chunker). Its Body spares
	// finding the body in the row again.
	NoCall func(r jsonl.Row) bool
	// Record, if set, reports whether a workflow record's row passes its
	// checks (Chunker.ValidRecord).
	Record func(row []byte) bool
	// Cost, if set, is the most a row may cost (Chunker.Cost).
	Cost func(r jsonl.Row) float64
}

// Scan reads batch b's input file f once, checking every row's model
// against models, and cutting the valid ones into chunks within lim, a
// model's rows sized to its capacity (its max_concurrency:
// Limits.RowsFor). An input that cannot be planned is an Invalid error; any
// other error is the bucket's, worth another try.
func Scan(ctx context.Context, blobs Blobs, b batch.Batch, f file.File, lim Limits, capacity func(model string) int, models Models) (Input, error) {
	if len(f.Objects) > maxInputObjects {
		return Input{}, Invalid{{Code: "too_many_parts", Message: fmt.Sprintf(
			"input file %s is made of %d uploaded parts; at most %d can be planned: upload it in fewer, larger parts", f.ID, len(f.Objects), maxInputObjects)}}
	}
	format, err := jsonl.FormatOf(f.Filename)
	if err != nil {
		return Input{}, Invalid{{Code: "invalid_file_format", Message: err.Error()}}
	}
	opts := jsonl.Options{Format: format, Endpoint: b.Endpoint, Model: b.CSVModel, KnownModel: models.Known, AllowedModel: models.Allowed, DefaultModel: models.Default}
	if b.Endpoint == endpoint.Messages {
		// Anthropic's Message Batches limits (docs/api.md "Anthropic Message Batches").
		opts.MaxRows, opts.MaxBytes = 100_000, 256*1000*1000
	}
	rc := &sizing{ctx: ctx, blobs: blobs, keys: f.Objects, sizes: make([]int64, len(f.Objects)), read: make([]bool, len(f.Objects))}
	defer func() { _ = rc.Close() }()
	var norm *batch.ObjectWriter
	var normW io.Writer
	if format == jsonl.CSV || b.CSVModel != "" {
		// A JSONL input of a batch with a model may hold simple rows
		// (docs/api.md "Files"), whose requests the scan synthesizes.
		norm = batch.NewObjectWriter(ctx, blobs, fmt.Sprintf("files/%s/%s/normalized/", b.Tenant, b.InputFileID+"-"+b.ID))
		norm.Tag = files.ExpiryTag(f) // it lives as long as the input it stands for
		normW = norm
	}
	lim = lim.OrDefaults()
	maxRows := func(model string) int { return lim.RowsFor(capacity(model)) }
	lanes := func(model string) (int, int) { return lim.LanesFor(capacity(model)) }
	split := &Chunker{Batch: b.ID, Tenant: b.Tenant, MaxRows: maxRows, Lanes: lanes, NoCallRows: lim.Rows, MaxBytes: lim.Bytes,
		NoCall: models.NoCall, ValidRecord: models.Record, Cost: models.Cost}
	res, err := SplitInput(rc, opts, split, normW)
	if err != nil {
		return Input{}, fmt.Errorf("scan input of %s: %w", b.ID, err)
	}
	if len(res.Errors) > 0 {
		return Input{}, Invalid(res.Errors)
	}
	in := Input{Result: res, Chunks: split.Chunks}
	if norm != nil {
		if in.Objects, err = norm.Close(); err != nil {
			return Input{}, fmt.Errorf("write normalized input of %s: %w", b.ID, err)
		}
		return in, nil
	}
	for i, k := range f.Objects {
		size := rc.sizes[i]
		if !rc.read[i] || f.ETag != "" {
			var etag string
			if size, etag, err = blobs.Head(ctx, k); err != nil {
				return Input{}, fmt.Errorf("size of %s: %w", k, err)
			}
			if f.ETag != "" && etag != f.ETag {
				return Input{}, Invalid{batch.InputChanged(f.ID)}
			}
		}
		// A presigned upload's object is pinned to what was validated
		// (SECURITY.md "Presigned URLs").
		in.Objects = append(in.Objects, batch.Object{Key: k, Size: size, ETag: f.ETag})
	}
	return in, nil
}

// sizing reads objects one after another as one stream, as Concat does,
// and keeps the size of each it read to its end: the scan that read them
// needs no HEAD of each afterwards (docs/design.md "A row's journey", plan).
// The next objects' GETs are made while the current one is read
// (prefetch, readAhead), so neither the objects' first-byte latencies nor
// their transfers add up.
type sizing struct {
	ctx   context.Context
	blobs Blobs
	keys  []string
	sizes []int64
	read  []bool // sizes[i] is object i's size
	i     int
	cur   io.Reader
	rc    io.Closer
	next  []chan opened // objects i+1's and on, once asked for (readAhead)
	err   error         // a failed open's, every later Read's
}

// opened is an object whose first bytes (head) were read.
type opened struct {
	rc   io.ReadCloser
	head []byte
	err  error
}

// readAhead is how many objects after the current one are read ahead,
// prefetchBytes of each: an upload's 4 MiB parts whole, 16 MiB at most in
// memory with the current one.
const (
	readAhead     = 3
	prefetchBytes = 4 << 20
)

// prefetch opens object i and reads its first bytes, in the background.
func (s *sizing) prefetch(i int) chan opened {
	ch := make(chan opened, 1)
	go func() {
		rc := s.blobs.Concat(s.ctx, s.keys[i:i+1])
		buf := make([]byte, prefetchBytes)
		n, err := io.ReadFull(rc, buf)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		ch <- opened{rc, buf[:n], err}
	}()
	return ch
}

// open makes object s.i the current one, and asks for the ones after it.
func (s *sizing) open() error {
	if len(s.next) == 0 {
		s.next = append(s.next, s.prefetch(s.i))
	}
	cur := s.next[0]
	s.next = s.next[1:]
	for j := s.i + 1 + len(s.next); j < len(s.keys) && len(s.next) < readAhead; j++ {
		s.next = append(s.next, s.prefetch(j))
	}
	o := <-cur
	s.rc = o.rc
	switch {
	case o.err == io.EOF:
		s.cur = bytes.NewReader(o.head)
	case o.err != nil:
		return o.err
	default:
		s.cur = io.MultiReader(bytes.NewReader(o.head), o.rc)
	}
	return nil
}

func (s *sizing) Read(p []byte) (int, error) {
	for s.i < len(s.keys) {
		if s.err != nil {
			return 0, s.err
		}
		if s.cur == nil {
			if s.err = s.open(); s.err != nil {
				return 0, s.err
			}
		}
		n, err := s.cur.Read(p)
		s.sizes[s.i] += int64(n)
		if err != io.EOF {
			return n, err
		}
		s.read[s.i] = true
		s.rc.Close()
		s.cur, s.rc, s.i = nil, nil, s.i+1
		if n > 0 {
			return n, nil
		}
	}
	return 0, io.EOF
}

// Close closes the current object and those read ahead.
func (s *sizing) Close() error {
	for _, next := range s.next {
		if o := <-next; o.rc != nil {
			o.rc.Close()
		}
	}
	if s.rc != nil {
		return s.rc.Close()
	}
	return nil
}

// BadRange is a chunk's byte range that does not parse into its planned
// rows: a poison range, which no retry can read.
type BadRange struct{ error }

// ReadChunk reads and parses chunk c's rows from b's input: the executor's
// runs, its dead-letter handler, internal/native's steps and a retry's
// input read them so. It reads the chunk's bytes from its first row to its
// last with one ranged GET (at most the plan's 4 MiB, Limits.Bytes, with
// the other models' rows between its spans: docs/design.md "Memory") and
// parses each span. A range that does not hold the planned rows is a
// BadRange error; one that cannot be read now, another.
func ReadChunk(ctx context.Context, r interface {
	ReadRange(ctx context.Context, objs []batch.Object, start, end int64) ([]byte, error)
}, b batch.Batch, c batch.Chunk) ([]jsonl.Request, error) {
	data, err := r.ReadRange(ctx, b.Input, c.Start, c.End)
	if err != nil {
		return nil, fmt.Errorf("read chunk %d of %s: %w", c.Index, c.Batch, err)
	}
	reqs, err := parseSpans(data, c)
	if err != nil {
		return nil, BadRange{fmt.Errorf("chunk %d of %s: %w", c.Index, c.Batch, err)}
	}
	return reqs, nil
}

// parseSpans parses the rows of c's spans out of data, its bytes from
// c.Start to c.End.
func parseSpans(data []byte, c batch.Chunk) ([]jsonl.Request, error) {
	if len(c.Spans) == 0 {
		return parseRows(data, c.Rows)
	}
	if int64(len(data)) != c.End-c.Start {
		return nil, fmt.Errorf("%d bytes read of its %d", len(data), c.End-c.Start)
	}
	reqs := make([]jsonl.Request, 0, c.Rows)
	for _, s := range c.Spans {
		if s.Start < c.Start || s.End > c.End || s.Start > s.End {
			return nil, fmt.Errorf("span [%d,%d) outside [%d,%d)", s.Start, s.End, c.Start, c.End)
		}
		rs, err := parseRows(data[s.Start-c.Start:s.End-c.Start], s.Rows)
		if err != nil {
			return nil, fmt.Errorf("rows from %d: %w", s.Row, err)
		}
		reqs = append(reqs, rs...)
	}
	if len(reqs) != c.Rows {
		return nil, fmt.Errorf("%d rows in its spans, %d planned", len(reqs), c.Rows)
	}
	return reqs, nil
}

// parseRows parses data, which must hold rows rows.
func parseRows(data []byte, rows int) ([]jsonl.Request, error) {
	reqs, err := jsonl.ParseRequests(data)
	if err == nil && len(reqs) != rows {
		err = fmt.Errorf("%d rows in its range, %d planned", len(reqs), rows)
	}
	return reqs, err
}
