package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/relaybatch/relay/internal/jsonl"
)

// batch submit --model M sets the model of every row. The API takes a
// batch's model only for CSV input (its rows have no model of their own);
// a JSONL row names its model in body.model, which the API uses as is. So
// for a JSONL file the CLI uploads a copy with body.model set to M on every
// row instead of the file itself.

// isJSONL says whether the API reads the file at path as JSONL: by its
// extension, as the API does.
func isJSONL(path string) bool {
	return strings.EqualFold(filepath.Ext(path), ".jsonl")
}

// prepareInput returns the file batch submit uploads for path: path itself,
// unless it is JSONL and model is set; then a temporary copy with the same
// base name (the API reads the format from the name) in which every row's
// body.model is model. cleanup removes the copy.
func prepareInput(path, model string) (upload string, cleanup func(), err error) {
	if model == "" || !isJSONL(path) {
		return path, func() {}, nil
	}
	in, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return "", nil, err
	} else if st.IsDir() || st.Size() == 0 {
		return path, func() {}, nil // nothing to set: upload says what is wrong
	}
	dir, err := os.MkdirTemp("", "relay-submit-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	upload = filepath.Join(dir, filepath.Base(path))
	out, err := os.OpenFile(upload, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		w := bufio.NewWriterSize(out, 256<<10)
		err = setModelJSONL(w, in, model)
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("set the model of the rows of %s: %w", path, err)
	}
	return upload, cleanup, nil
}

// setModelJSONL copies the JSONL input r to w with body.model set to model
// on every row, changing no other byte: line breaks (LF or CRLF), a byte
// order mark, blank lines, the order and spacing of members stay. A row
// whose body has no model gets one as its first member. Every "model" member
// of every "body" member is set, so that duplicate keys cannot leave a
// reader that takes the first (or the last) with another model.
//
// A line that is not a request with a body object cannot carry a model: it
// is copied as it is, and the API's validation reports it with its line
// number, as it would without --model.
func setModelJSONL(w io.Writer, r io.Reader, model string) error {
	mj, err := json.Marshal(model)
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for first := true; ; first = false {
		line, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return rerr
		}
		if len(line) == 0 && rerr != nil {
			return nil
		}
		text, end := splitLineEnd(line)
		if first && bytes.HasPrefix(text, utf8BOM) {
			if _, err := w.Write(utf8BOM); err != nil {
				return err
			}
			text = text[len(utf8BOM):]
		}
		if out, ok := withModel(text, mj); ok {
			text = out
		}
		if _, err := w.Write(text); err != nil {
			return err
		}
		if _, err := w.Write(end); err != nil {
			return err
		}
		if rerr != nil { // io.EOF: a last line without a line break
			return nil
		}
	}
}

var utf8BOM = []byte("\xef\xbb\xbf")

// splitLineEnd splits a line into its text and its line break ("\n",
// "\r\n" or none).
func splitLineEnd(line []byte) (text, end []byte) {
	n := len(line)
	switch {
	case bytes.HasSuffix(line, []byte("\r\n")):
		n -= 2
	case bytes.HasSuffix(line, []byte("\n")):
		n--
	}
	return line[:n], line[n:]
}

// withModel returns the request line with every body.model set to the JSON
// string mj, and false when the line is not a JSON object with an object
// body. Keys match exactly, after unescaping, as the API matches them.
func withModel(line, mj []byte) ([]byte, bool) {
	if !json.Valid(line) {
		return nil, false
	}
	type edit struct {
		start, end int
		text       []byte
	}
	var edits []edit
	top, ok := jsonl.Members(line, 0)
	if !ok {
		return nil, false
	}
	for _, m := range top {
		if m.Key != "body" || line[m.Start] != '{' {
			continue
		}
		body, _ := jsonl.Members(line, m.Start)
		found := false
		for _, bm := range body {
			if bm.Key == "model" {
				edits = append(edits, edit{bm.Start, bm.End, mj})
				found = true
			}
		}
		if !found {
			ins := append([]byte(`"model":`), mj...)
			if len(body) > 0 {
				ins = append(ins, ',')
			}
			edits = append(edits, edit{m.Start + 1, m.Start + 1, ins})
		}
	}
	if len(edits) == 0 {
		return nil, false
	}
	var out []byte
	at := 0
	for _, e := range edits {
		out = append(out, line[at:e.start]...)
		out = append(out, e.text...)
		at = e.end
	}
	return append(out, line[at:]...), true
}
