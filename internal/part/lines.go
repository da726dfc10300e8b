package part

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/sched"
	"github.com/relaybatch/relay/internal/spool"
)

// SpillAt is how many bytes of lines a Lines keeps in memory before it
// moves them to a temporary file.
const SpillAt = spool.DefaultInMemory

// Lines are the lines of a chunk's rows, written as each row ends (Set)
// rather than kept as answers until the last row is done: a run holds the
// answers of its rows in flight and at most SpillAt bytes of lines, the rest
// is in a temporary file (docs/design.md "Memory"). Rows end in any order;
// Commit puts their lines in row order. Safe for concurrent use.
type Lines struct {
	mu    sync.Mutex
	b     batch.Batch
	c     batch.Chunk
	w     builder
	spans []span       // by row; n == 0: not set
	spool spool.Buffer // the lines, in the order rows ended
	err   error
}

// span is where a row's line (with its line break) is, and what the row
// added to the part (Cut takes it out again).
type span struct {
	off, n int64
	letter byte
	row    Part // its counts, tokens and usage by model
	uoff   int  // its usage event in the builder's usage, if any
}

// NewLines returns the Lines of chunk c's rows of batch b, each line's id
// that of its input row (c.Row); usage events carry now.
func NewLines(b batch.Batch, c batch.Chunk, now time.Time) *Lines {
	return &Lines{b: b, c: c, w: builder{b: b, now: now, p: Part{ByModel: map[string]sched.UsageAgg{}}}, spans: make([]span, c.Rows)}
}

// LinesOf returns the Lines of outs, the outcomes of chunk c's rows of
// batch b, in order (so c has len(outs) rows).
func LinesOf(b batch.Batch, c batch.Chunk, outs []Outcome, now time.Time) *Lines {
	c.Rows = len(outs)
	l := NewLines(b, c, now)
	for i, o := range outs {
		l.Set(i, o)
	}
	return l
}

// Set records row i's outcome as its line; the outcome is not kept. A
// row set twice keeps its first line. An error writing the line (a full
// disk) is Commit's. The line is rendered before the lock, from what
// NewLines was given alone, so the rows of a chunk that end together
// render at once and only write one after another.
func (l *Lines) Set(i int, o Outcome) {
	if i >= l.c.Rows {
		return
	}
	rw := builder{b: l.w.b, row: l.c.Row(i), model: l.c.Model, prior: l.c.PriorAttempts, now: l.w.now, p: Part{ByModel: map[string]sched.UsageAgg{}}}
	line, letter := rw.render(LineID(l.b.ID, rw.row), o)
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || i >= len(l.spans) || l.spans[i].n > 0 {
		return
	}
	off := l.spool.Size()
	if _, l.err = l.spool.Write(line); l.err != nil {
		return
	}
	rw.p.Usage = rw.usage.Bytes()
	l.spans[i] = span{off: off, n: int64(len(line)), letter: letter, row: rw.p}
	l.w.usage.Write(rw.p.Usage)
	addPart(&l.w.p, rw.p)
}

// Answered says which rows are set.
func (l *Lines) Answered() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := make([]bool, len(l.spans))
	for i, s := range l.spans {
		set[i] = s.n > 0
	}
	return set
}

// Keep keeps the rows answered says, in order, as if no other row had
// been set: the part is then theirs, with their counts and usage alone (a
// run that stops commits the rows it answered, docs/design.md
// "Scheduling", split).
func (l *Lines) Keep(answered []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.spans[:0]
	p := Part{ByModel: map[string]sched.UsageAgg{}}
	var usage bytes.Buffer
	for i, s := range l.spans {
		if i < len(answered) && answered[i] {
			kept = append(kept, s)
			addPart(&p, s.row)
			usage.Write(s.row.Usage)
		}
	}
	l.spans, l.w.p, l.w.usage = kept, p, usage
}

// addPart adds row's counts, tokens and usage by model to p.
func addPart(p *Part, row Part) {
	p.Completed += row.Completed
	p.Failed += row.Failed
	p.Expired += row.Expired
	p.Cancelled += row.Cancelled
	t := &p.Tokens
	t.InputTokens += row.Tokens.InputTokens
	t.OutputTokens += row.Tokens.OutputTokens
	t.TotalTokens += row.Tokens.TotalTokens
	t.CachedTokens += row.Tokens.CachedTokens
	t.ReasoningTokens += row.Tokens.ReasoningTokens
	for m, u := range row.ByModel {
		agg := p.ByModel[m]
		agg.Add(u)
		p.ByModel[m] = agg
	}
}

// Tally is how many of the rows set so far go to the output file and how
// many to the error file.
func (l *Lines) Tally() batch.Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return batch.Counts{Completed: l.w.p.Completed, Failed: l.w.p.Failed}
}

// Close lets go of the lines, in memory or in the temporary file, which
// it removes; the counts stay (Tally). A run holds its lines until its
// commit, not until its invocation ends (docs/design.md "Memory").
func (l *Lines) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = errors.New("closed")
	l.spans, l.w.usage = nil, bytes.Buffer{}
	return l.spool.Close()
}

// Object is a part object's bytes: a reader that can seek (the S3 SDK
// signs and checksums the body before sending it) and its size.
type Object struct {
	Body io.ReadSeeker
	Size int64
	Tag  string // expiry class (Kept)
}

// part returns the part once every row is set: the objects by kind
// ("out", "err", "usage"), in row order, and the counts.
func (l *Lines) part() (map[string]Object, Part, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, Part{}, fmt.Errorf("spool the lines of batch %s: %w", l.b.ID, l.err)
	}
	src := &l.spool
	pattern := make([]byte, len(l.spans))
	out, errs := &segments{src: src}, &segments{src: src}
	for i, s := range l.spans {
		if s.n == 0 {
			return nil, Part{}, errors.New("part: a row's line is missing")
		}
		pattern[i] = s.letter
		if s.letter == KindOut {
			out.add(s)
		} else {
			errs.add(s)
		}
	}
	p := l.w.p
	p.Pattern, p.Usage = string(pattern), l.w.usage.Bytes()
	return map[string]Object{
		"out":   {Body: io.NewSectionReader(out, 0, out.size), Size: out.size},
		"err":   {Body: io.NewSectionReader(errs, 0, errs.size), Size: errs.size},
		"usage": {Body: bytes.NewReader(p.Usage), Size: int64(len(p.Usage))},
	}, p, nil
}

// segments reads spans of src one after another as one stream.
type segments struct {
	src   io.ReaderAt
	spans []span
	at    []int64 // where each span starts in the stream
	size  int64
}

func (g *segments) add(s span) {
	g.spans, g.at = append(g.spans, s), append(g.at, g.size)
	g.size += s.n
}

func (g *segments) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	i := sort.Search(len(g.at), func(i int) bool { return g.at[i]+g.spans[i].n > off })
	for ; i < len(g.spans) && n < len(p); i++ {
		s, skip := g.spans[i], off+int64(n)-g.at[i]
		m, err := g.src.ReadAt(p[n:min(len(p), n+int(s.n-skip))], s.off+skip)
		n += m
		if err != nil && !(errors.Is(err, io.EOF) && int64(m) == s.n-skip) {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
