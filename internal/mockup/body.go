package mockup

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeBody decodes a request body as json.Unmarshal into a
// map[string]any does, with the same value and the same error. Bodies in
// the common form (an object whose strings have no escapes) are read in
// one pass by plainJSON; any other goes through encoding/json, which
// checks the whole body before it decodes it and so reads it twice.
func decodeBody(raw []byte) (map[string]any, error) {
	p := plainJSON{b: raw}
	if body, ok := p.object(); ok && p.end() {
		return body, nil
	}
	var body map[string]any
	err := json.Unmarshal(raw, &body)
	return body, err
}

// plainJSON reads JSON without string escapes, invalid UTF-8 or more than
// maxPlainDepth levels of nesting. Each method reports false for any input
// it does not read exactly as encoding/json would, valid or not.
type plainJSON struct {
	b     []byte
	i     int
	depth int
}

const maxPlainDepth = 64

// end reports whether only whitespace is left.
func (p *plainJSON) end() bool {
	p.space()
	return p.i == len(p.b)
}

// space skips what encoding/json takes as whitespace.
func (p *plainJSON) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (p *plainJSON) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *plainJSON) value() (any, bool) {
	p.space()
	if p.i == len(p.b) {
		return nil, false
	}
	switch p.b[p.i] {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		return p.string()
	case 't':
		return true, p.literal("true")
	case 'f':
		return false, p.literal("false")
	case 'n':
		return nil, p.literal("null")
	}
	return p.number()
}

func (p *plainJSON) object() (map[string]any, bool) {
	if !p.next('{') || !p.enter() {
		return nil, false
	}
	m := map[string]any{}
	if p.next('}') {
		return m, p.leave()
	}
	for {
		p.space()
		key, ok := p.string()
		if !ok || !p.next(':') {
			return nil, false
		}
		if m[key], ok = p.value(); !ok {
			return nil, false
		}
		if p.next('}') {
			return m, p.leave()
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

func (p *plainJSON) array() ([]any, bool) {
	if !p.next('[') || !p.enter() {
		return nil, false
	}
	a := []any{}
	if p.next(']') {
		return a, p.leave()
	}
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if p.next(']') {
			return a, p.leave()
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

func (p *plainJSON) enter() bool {
	p.depth++
	return p.depth <= maxPlainDepth
}

func (p *plainJSON) leave() bool {
	p.depth--
	return true
}

// string reads a string at p.i that holds no escape and only valid UTF-8:
// then its bytes are its value.
func (p *plainJSON) string() (string, bool) {
	if p.i == len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	ascii := true
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[p.i+1 : j]
			p.i = j + 1
			return string(s), ascii || utf8.Valid(s)
		case c == '\\' || c < ' ':
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

func (p *plainJSON) literal(word string) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

// number reads a JSON number (-?int frac? exp?) as encoding/json reads one
// into an interface: strconv.ParseFloat, whose error it leaves to it.
func (p *plainJSON) number() (any, bool) {
	start := p.i
	p.skip('-')
	switch {
	case p.skip('0'):
	case p.digits() == 0:
		return nil, false
	}
	if p.skip('.') && p.digits() == 0 {
		return nil, false
	}
	if p.skip('e') || p.skip('E') {
		if !p.skip('+') {
			p.skip('-')
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	f, err := strconv.ParseFloat(string(p.b[start:p.i]), 64)
	return f, err == nil
}

func (p *plainJSON) skip(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *plainJSON) digits() int {
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}
