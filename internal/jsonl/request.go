package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Request is a parsed normalized row, as the executor needs it.
type Request struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// ErrMalformedRequest is wrapped by ParseRequests' errors: the range does not
// hold the rows Scan validated, which retrying cannot fix.
var ErrMalformedRequest = errors.New("malformed request line")

// ParseRequests parses a byte range of a normalized JSONL file (complete
// lines, possibly without a final line break, with blank lines and CRLF
// allowed) into its requests, in order. It does not validate again what
// Scan did (models, endpoints, ids); it fails, naming the line relative to
// b (1-based), when a line is not a JSON object with a string custom_id,
// method and url and an object body. Each Body aliases b.
func ParseRequests(b []byte) ([]Request, error) {
	b = bytes.TrimPrefix(b, bom)
	reqs := make([]Request, 0, bytes.Count(b, []byte("\n"))+1)
	for n := 1; len(b) > 0; n++ {
		text := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			text, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		text = bytes.TrimSuffix(text, []byte("\r"))
		if isBlank(text) {
			continue
		}
		req, err := parseRequest(text)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %v", n, ErrMalformedRequest, err)
		}
		reqs = append(reqs, req)
	}
	return reqs, nil
}

func parseRequest(text []byte) (Request, error) {
	if !utf8.Valid(text) {
		return Request{}, errors.New("not valid UTF-8")
	}
	raw, err := splitRequest(text)
	if err != nil {
		return Request{}, err
	}
	id, ok1 := stringValue(raw.customID)
	method, ok2 := stringValue(raw.method)
	url, ok3 := stringValue(raw.url)
	switch {
	case !ok1:
		return Request{}, errors.New("custom_id is not a string")
	case !ok2:
		return Request{}, errors.New("method is not a string")
	case !ok3:
		return Request{}, errors.New("url is not a string")
	case !isObject(raw.body):
		return Request{}, errors.New("body is not an object")
	}
	return Request{CustomID: string(id), Method: string(method), URL: string(url), Body: raw.body}, nil
}
