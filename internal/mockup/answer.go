package mockup

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// writeObject writes an answer as writeJSON does, byte for byte, without
// encoding/json's reflection and key sorting for the objects, arrays,
// strings and ints that answers are made of (appendJSON).
func writeObject(w http.ResponseWriter, status int, body object) {
	buf := answerBuffers.Get().(*[]byte)
	b, err := appendJSON((*buf)[:0], body)
	defer func() {
		if *buf = b; cap(b) <= maxPooledAnswer {
			answerBuffers.Put(buf)
		}
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err == nil {
		// A write error here means the client went away; nobody to tell.
		_, _ = w.Write(append(b, '\n'))
	}
}

// answerBuffers are writeObject's buffers, kept for the next answers
// unless an echo of a large body made them larger than maxPooledAnswer.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

const maxPooledAnswer = 1 << 20

// appendJSON appends v as json.Marshal encodes it: object keys sorted,
// strings escaped as encoding/json escapes them (appendString); values of
// other types through json.Marshal itself.
func appendJSON(b []byte, v any) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case object:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendString(b, k), ':')
			if b, err = appendJSON(b, v[k]); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	case []object:
		return appendArray(b, v)
	case []any:
		return appendArray(b, v)
	}
	j, err := json.Marshal(v)
	return append(b, j...), err
}

func appendArray[E any](b []byte, a []E) ([]byte, error) {
	if a == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	var err error
	for i, e := range a {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendJSON(b, e); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

// jsonSafe are the ASCII bytes encoding/json writes as they are.
var jsonSafe = func() (safe [utf8.RuneSelf]bool) {
	for c := byte(' '); c < utf8.RuneSelf; c++ {
		safe[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return safe
}()

// appendString appends s quoted as encoding/json quotes a string with its
// default HTML escaping: <, > and & as \u003c, \u003e, \u0026, other
// control bytes as \u00XX or their short escape, invalid UTF-8 as \ufffd,
// U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
