package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/relaybatch/relay/internal/spool"
)

// Results are a step's results as the JSON array a results event
// carries, each result written to a spool (spool.Buffer) as its request
// ends, in any order: a step holds the answers of its requests in flight,
// never all of them, and the event and the checkpoint read the array from
// the spool (docs/design.md "Memory"). The zero value and nil are an
// empty list; Close removes the spool. Set is safe for concurrent use.
type Results struct {
	mu    sync.Mutex
	spool spool.Buffer
	spans []resultSpan // by position; n == 0: not set
	at    []int64      // where each position's separator starts in the array, once sealed
	size  int64        // the array's bytes, once sealed
}

type resultSpan struct{ off, n int64 }

// resultsInMemory is what Results keep in memory before they move to
// their spool's file: enough for most steps' results, inline in the
// checkpoint item (internal/wfhost) or not.
const resultsInMemory = 1 << 20

// NewResults returns the results of a step of n requests.
func NewResults(n int) *Results {
	return &Results{spool: spool.Buffer{InMemory: resultsInMemory}, spans: make([]resultSpan, n)}
}

// ResultsOf returns rs as Results (tests, small lists).
func ResultsOf(rs []Result) (*Results, error) {
	r := NewResults(len(rs))
	for i, res := range rs {
		if err := r.Set(i, res); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Set writes the result at position i; a position set twice keeps its
// first.
func (r *Results) Set(i int, res Result) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result %d: %w", i, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.spans) || r.spans[i].n > 0 {
		return nil
	}
	off := r.spool.Size()
	if _, err := r.spool.Write(data); err != nil {
		return fmt.Errorf("spool result %d: %w", i, err)
	}
	r.spans[i] = resultSpan{off: off, n: int64(len(data))}
	r.at = nil
	return nil
}

// Len is how many results there are.
func (r *Results) Len() int {
	if r == nil {
		return 0
	}
	return len(r.spans)
}

// seal lays the array out: "[", the results in order with "," between
// them, "]". A position not set is an error.
func (r *Results) seal() error {
	if r.at != nil || len(r.spans) == 0 {
		return nil
	}
	at := make([]int64, len(r.spans))
	size := int64(0)
	for i, s := range r.spans {
		if s.n == 0 {
			return fmt.Errorf("workflow: result %d of %d is missing", i, len(r.spans))
		}
		at[i], size = size, size+1+s.n // "[" or "," then the result
	}
	r.at, r.size = at, size+1 // "]"
	return nil
}

// Array returns a reader of the JSON array and its size.
func (r *Results) Array() (*io.SectionReader, int64, error) {
	if r.Len() == 0 {
		return io.NewSectionReader(bytes.NewReader([]byte("[]")), 0, 2), 2, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.seal(); err != nil {
		return nil, 0, err
	}
	return io.NewSectionReader(arrayView{r}, 0, r.size), r.size, nil
}

// arrayView reads the sealed array of r.
type arrayView struct{ r *Results }

func (v arrayView) ReadAt(p []byte, off int64) (int, error) {
	r, n := v.r, 0
	i := sort.Search(len(r.at), func(i int) bool { return r.at[i]+1+r.spans[i].n > off })
	for ; i < len(r.spans) && n < len(p); i++ {
		pos := off + int64(n) - r.at[i] // within "sep" + result
		if pos == 0 {
			p[n] = ','
			if i == 0 {
				p[n] = '['
			}
			n, pos = n+1, 1
			if n == len(p) {
				break
			}
		}
		s := r.spans[i]
		m, err := r.spool.ReadAt(p[n:min(len(p), n+int(s.n-(pos-1)))], s.off+pos-1)
		n += m
		if err != nil && !(errors.Is(err, io.EOF) && int64(m) == s.n-(pos-1)) {
			return n, err
		}
	}
	if n < len(p) && off+int64(n) == r.size-1 {
		p[n] = ']'
		n++
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// List decodes the results (tests, small lists).
func (r *Results) List() ([]Result, error) {
	data, err := r.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var rs []Result
	return rs, json.Unmarshal(data, &rs)
}

// MarshalJSON writes the array whole: for a checkpoint small enough to
// hold it (internal/wfhost moves bigger ones to S3 through Array).
func (r *Results) MarshalJSON() ([]byte, error) {
	a, size, err := r.Array()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(a, data); err != nil {
		return nil, fmt.Errorf("read the results back: %w", err)
	}
	return data, nil
}

// UnmarshalJSON reads an array of results into the spool.
func (r *Results) UnmarshalJSON(data []byte) error {
	rs, err := ReadResults(bytes.NewReader(data))
	if err != nil {
		return err
	}
	r.Close()
	r.spool, r.spans, r.at, r.size = rs.spool, rs.spans, nil, 0
	return nil
}

// ReadResults reads a JSON array of results, one at a time, into a
// spool: a checkpoint's results from S3 are never held whole.
func ReadResults(rd io.Reader) (*Results, error) {
	dec := json.NewDecoder(rd)
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, fmt.Errorf("read results: want a JSON array (%v)", err)
	}
	r := NewResults(0)
	for dec.More() {
		var res Result
		if err := dec.Decode(&res); err != nil {
			r.Close()
			return nil, fmt.Errorf("read result %d: %w", len(r.spans), err)
		}
		r.spans = append(r.spans, resultSpan{})
		if err := r.Set(len(r.spans)-1, res); err != nil {
			r.Close()
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		r.Close()
		return nil, fmt.Errorf("read results: %w", err)
	}
	return r, nil
}

// Close removes the spool; r is empty after. Closing nil does nothing.
func (r *Results) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans, r.at, r.size = nil, nil, 0
	return r.spool.Close()
}
