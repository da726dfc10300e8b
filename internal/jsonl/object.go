package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/relaybatch/relay/internal/ijson"
)

// A row is checked by walking the members of its JSON object rather than
// decoding it: after ijson.Valid (encoding/json.Valid's grammar, several
// times faster) has vouched for the syntax, finding where each key and
// value starts and ends takes no allocation, where the standard decoder
// would copy every member it keeps. Keys match exactly (encoding/json
// matches them case-insensitively; OpenAI does not) and the last of
// duplicate keys would win (as with encoding/json), but a row with a
// duplicate member name at any depth is refused (ijson.Check): an upstream
// could read another member than the one validated. Scan and ParseRequests
// share this code, so the executor reads a row exactly as it was validated.

// rawRequest holds the raw JSON values of a request's members; nil is absent.
type rawRequest struct {
	customID, method, url, body []byte
	// The members of a simple row (docs/api.md "Files", simple rows), and
	// the name of its first member that is none of the above.
	messages, prompt, other []byte
}

// splitRequest finds the members of a request line.
func splitRequest(b []byte) (rawRequest, error) {
	var r rawRequest
	if !ijson.Valid(b) {
		return r, syntaxError(b)
	}
	if err := ijson.Check(b); err != nil {
		return r, err
	}
	it, ok := newObjectIter(b)
	if !ok {
		return r, fmt.Errorf("the line is %s, not a JSON object", kindOf(b))
	}
	for {
		key, value, ok := it.next()
		if !ok {
			return r, nil
		}
		switch string(key) {
		case "custom_id":
			r.customID = value
		case "method":
			r.method = value
		case "url":
			r.url = value
		case "body":
			r.body = value
		case "messages":
			r.messages = value
		case "prompt":
			r.prompt = value
		default:
			if r.other == nil {
				r.other = key
			}
		}
	}
}

// rawBody holds the members of a request body that validation looks at.
type rawBody struct {
	model, stream []byte
}

// splitBody finds the members of a body that isObject accepted.
func splitBody(b []byte) rawBody {
	var r rawBody
	it, _ := newObjectIter(b)
	for {
		key, value, ok := it.next()
		if !ok {
			return r
		}
		switch string(key) {
		case "model":
			r.model = value
		case "stream":
			r.stream = value
		}
	}
}

// bodyOf returns the body of a request this package wrote (a CSV record's,
// a simple row's).
func bodyOf(req []byte) []byte {
	it, _ := newObjectIter(req)
	for {
		key, value, ok := it.next()
		if !ok || string(key) == "body" {
			return value
		}
	}
}

// syntaxError explains why b is not valid JSON. It runs only for bad lines.
func syntaxError(b []byte) error {
	err := json.Unmarshal(b, new(struct{}))
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return errors.New("invalid JSON")
}

// kindOf names the kind of a valid JSON value.
func kindOf(v []byte) string {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return "empty"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// objectIter walks the members of a JSON object that ijson.Valid accepted.
type objectIter struct {
	b []byte
	i int
}

// newObjectIter starts at the object b, reporting false when b is another
// kind of value.
func newObjectIter(b []byte) (objectIter, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return objectIter{}, false
	}
	return objectIter{b: b, i: i + 1}, true
}

// next returns the next member: its key, unescaped, and its raw value.
func (it *objectIter) next() (key, value []byte, ok bool) {
	b := it.b
	i := skipSpace(b, it.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return nil, nil, false // '}': the end
	}
	end := skipString(b, i)
	key, _ = stringValue(b[i:end])
	i = skipSpace(b, end)
	i = skipSpace(b, i+1) // past ':'
	end = skipValue(b, i)
	it.i = end
	return key, b[i:end], true
}

// Member is one member of a JSON object: its key, unescaped, and where its
// value starts and ends in the text.
type Member struct {
	Key        string
	Start, End int
}

// Members lists the members of the object that starts at or after b[from]
// (after white space), in order, and false when no object starts there. b
// must be valid JSON (json.Valid), which spares checking the syntax here.
// The CLI uses it to set the model of a row without re-encoding the line.
func Members(b []byte, from int) ([]Member, bool) {
	it, ok := newObjectIter(b[from:])
	if !ok {
		return nil, false
	}
	var ms []Member
	for {
		key, v, ok := it.next()
		if !ok {
			return ms, true
		}
		end := from + it.i
		ms = append(ms, Member{Key: string(key), Start: end - len(v), End: end})
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] ==
// '"': its end is the first quote after it that an even number of
// backslashes precedes, which bytes.IndexByte finds faster than a loop
// over the long strings of chat rows.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		j += k
		p := j - 1
		for p > i && b[p] == '\\' {
			p--
		}
		if (j-1-p)%2 == 0 {
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i // a number, true, false or null
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && !isSpace(b[j]) {
		j++
	}
	return j
}

// stringValue returns the contents of the raw JSON string v, unescaped, and
// whether v is a string at all. Only strings with escapes cost a copy.
func stringValue(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return v[1 : len(v)-1], true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

func isNull(v []byte) bool { return v == nil || string(v) == "null" }

func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }
