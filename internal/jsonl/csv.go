package jsonl

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A CSV input file (the panel's seed feature) is either one column of
// prompts, with an optional header "prompt", or two columns under the
// required header "custom_id,prompt". Each record becomes a chat completion
// request for the batch's model; custom_id defaults to row-<n>, n counting
// data records from 1.
//
// Row ranges of a CSV file are ranges of the CSV bytes: encoding/csv skips
// empty lines without saying where, so a record's range starts where the
// previous one ended and takes in the empty lines before it. Row.JSON is the
// synthesized request; a caller that needs JSONL ranges writes those out.

// scanCSV validates a CSV file of prompts.
func (s *scanner) scanCSV(in *countingReader) error {
	br := bufio.NewReaderSize(in, readBufferSize)
	base, err := skipBOM(br)
	if err != nil {
		return err
	}
	rd := csv.NewReader(br) // reuses br: it is a big enough bufio.Reader
	rd.FieldsPerRecord = -1 // column counts are checked here, with clearer messages
	rd.ReuseRecord = true
	enc := newChatEncoder(s.opts.Model)

	var (
		first    = true
		twoCols  bool
		prevEnd  int64 // rd's offset where the next record starts
		nextLine = 1   // the line after the previous record
	)
	for {
		// encoding/csv holds a whole record in memory, so the reader under it
		// refuses to go further than a record of MaxLineBytes (and the read
		// buffer) past the previous record. Past that the CSV cannot be
		// resynchronized, so scanning stops there.
		in.stop = base + prevEnd + int64(s.opts.MaxLineBytes) + readBufferSize + 2
		rec, err := rd.Read()
		if err == io.EOF {
			return nil
		}
		start, end := base+prevEnd, base+rd.InputOffset()
		prevEnd = rd.InputOffset()

		var pe *csv.ParseError
		switch {
		case errors.Is(err, errTooLarge):
			return err
		case errors.Is(err, errRecordTooLong):
			if s.newRow(nextLine) {
				s.fail(nextLine, CodeLineTooLong, "", "the record is longer than %d bytes", s.opts.MaxLineBytes)
			}
			return nil
		case errors.As(err, &pe):
			first = false
			nextLine = pe.Line + 1
			if !s.newRow(pe.StartLine) || !s.fail(pe.StartLine, CodeInvalidCSV, "", "invalid CSV: %v", pe.Err) {
				return nil
			}
			continue
		case err != nil:
			return err
		}

		line, _ := rd.FieldPos(0)
		nextLine = line + 1
		for _, f := range rec {
			nextLine += strings.Count(f, "\n") // encoding/csv turns every line break in a quoted field into "\n"
		}
		if first {
			first = false
			if cols := csvHeader(rec); cols > 0 {
				twoCols = cols == 2
				continue
			}
		}
		if !s.newRow(line) {
			return nil
		}
		if end-start > int64(s.opts.MaxLineBytes) {
			if !s.fail(line, CodeLineTooLong, "", "the record is longer than %d bytes", s.opts.MaxLineBytes) {
				return nil
			}
			continue
		}
		id, prompt, bad := s.checkRecord(rec, line, twoCols)
		if bad != nil {
			if !s.add(bad) {
				return nil
			}
			continue
		}
		s.res.Model = s.opts.Model
		js := enc.encode(id, prompt)
		row := Row{
			Index:    s.res.Rows - 1,
			Line:     line,
			Start:    start,
			End:      end,
			CustomID: id,
			Model:    s.opts.Model,
			JSON:     js,
			Body:     bodyOf(js),
		}
		if err := s.emit(row); err != nil {
			return err
		}
	}
}

// csvHeader returns the number of columns a header names, 0 if rec is
// not a header.
func csvHeader(rec []string) int {
	is := func(field, name string) bool { return strings.EqualFold(strings.TrimSpace(field), name) }
	switch {
	case len(rec) == 1 && is(rec[0], "prompt"):
		return 1
	case len(rec) == 2 && is(rec[0], "custom_id") && is(rec[1], "prompt"):
		return 2
	}
	return 0
}

// checkRecord validates one data record and returns its custom_id and prompt.
func (s *scanner) checkRecord(rec []string, line int, twoCols bool) (id, prompt string, bad *LineError) {
	switch {
	case twoCols && len(rec) != 2:
		return "", "", problem(line, CodeInvalidCSV, "", "the record has %d columns, but the header custom_id,prompt names 2", len(rec))
	case !twoCols && len(rec) != 1:
		return "", "", problem(line, CodeInvalidCSV, "", "the record has %d columns: use one column of prompts, or two under the header custom_id,prompt", len(rec))
	}
	for _, f := range rec {
		if !utf8.ValidString(f) {
			return "", "", problem(line, CodeInvalidUTF8, "", "the record is not valid UTF-8")
		}
	}
	prompt = rec[len(rec)-1]
	if twoCols {
		id = rec[0]
		if id == "" {
			return "", "", problem(line, CodeMissingCustomID, "custom_id", "custom_id is empty")
		}
		if first := s.useID([]byte(id), line); first != 0 {
			return "", "", problem(line, CodeDuplicateCustomID, "custom_id", "custom_id %q is already used on line %d", clip([]byte(id)), first)
		}
	} else {
		id = "row-" + strconv.Itoa(s.res.Rows)
	}
	if strings.TrimSpace(prompt) == "" {
		return "", "", problem(line, CodeEmptyPrompt, "prompt", "the prompt is empty")
	}
	return id, prompt, nil
}

// chatEncoder writes the normalized JSONL request of a CSV record.
type chatEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
	req chatRequest
}

type chatRequest struct {
	CustomID string `json:"custom_id"`
	Method   string `json:"method"`
	URL      string `json:"url"`
	Body     struct {
		Model    string        `json:"model"`
		Messages []chatMessage `json:"messages"`
	} `json:"body"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func newChatEncoder(model string) *chatEncoder {
	c := &chatEncoder{}
	c.enc = json.NewEncoder(&c.buf)
	c.enc.SetEscapeHTML(false) // prompts are text for a model, not for a browser
	c.req.Method, c.req.URL, c.req.Body.Model = "POST", chatCompletions, model
	c.req.Body.Messages = []chatMessage{{Role: "user"}}
	return c
}

// encode returns the request without its line break, valid until the next call.
func (c *chatEncoder) encode(id, prompt string) []byte {
	c.buf.Reset()
	c.req.CustomID, c.req.Body.Messages[0].Content = id, prompt
	_ = c.enc.Encode(&c.req) // cannot fail: strings only, all valid UTF-8
	return bytes.TrimSuffix(c.buf.Bytes(), []byte("\n"))
}
