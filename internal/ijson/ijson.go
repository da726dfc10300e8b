// Package ijson checks the rule of I-JSON (RFC 7493) that decoders
// disagree on: an object never holds two members with the same name.
// encoding/json, Python and JavaScript keep the last of duplicate members,
// gjson and sjson the first, so a body that names "model" twice would be
// routed and admitted as one model and run upstream as another. Every
// decoder of untrusted JSON (API bodies, input rows, workflow answers, the
// body a row sends upstream) refuses such JSON with Check (docs/api.md
// "Errors", SECURITY.md "Hostile input"). Valid checks the syntax those
// decoders would, as encoding/json.Valid does, faster on long strings.
package ijson

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"unicode/utf16"
	"unicode/utf8"
)

// DuplicateError names a member name that an object holds twice.
type DuplicateError struct {
	Name   string // unescaped
	Offset int    // byte offset of its second occurrence
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("duplicate member name %q at byte %d: a JSON object may not repeat a name (I-JSON, RFC 7493)", e.Name, e.Offset)
}

// linear is how many members of an object are compared one by one before
// the object gets a hash set: nearly every object is smaller, and
// comparing a few names costs less than hashing them.
const linear = 16

// frame is an open array or object.
type frame struct {
	array bool
	first int              // names[first:] are the object's member names
	set   map[uint64]int32 // hash of a name → its index in names, once the object is large
}

var seed = maphash.MakeSeed()

// Check returns a *DuplicateError for the first member name repeated in an
// object of b, at any depth, comparing names after unescaping (as decoders
// do: "\u006dodel" is "model"), or nil. It reads b once, allocating only
// for names with escapes or invalid UTF-8 and for objects of more than a
// few members.
//
// b is meant to be valid JSON; syntax is the caller's decoder's to judge.
// On anything else Check neither fails nor promises an answer.
func Check(b []byte) error {
	var stackBuf [16]frame
	var namesBuf [64][]byte
	stack, names := stackBuf[:0], namesBuf[:0]
	var scratch []byte // unescaped names
	key := false       // the next string is a member name
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end := stringEnd(b, i)
			if key {
				key = false
				name, ok := plain(b[i+1 : end])
				if !ok {
					start := len(scratch)
					scratch = unquote(scratch, b[i+1:end])
					name = scratch[start:len(scratch):len(scratch)]
				}
				f := &stack[len(stack)-1]
				if repeated(f, names, name) {
					return &DuplicateError{Name: string(name), Offset: i}
				}
				names = append(names, name)
			}
			i = end
		case '{':
			stack = append(stack, frame{first: len(names)})
			key = true
		case '[':
			stack = append(stack, frame{array: true})
			key = false
		case '}', ']':
			key = false
			if len(stack) == 0 {
				return nil // not JSON
			}
			if f := stack[len(stack)-1]; !f.array {
				names = names[:f.first]
			}
			stack = stack[:len(stack)-1]
		case ',':
			key = len(stack) > 0 && !stack[len(stack)-1].array
		}
	}
	return nil
}

// repeated reports whether the object f already has a member named name,
// which is about to be appended to names.
func repeated(f *frame, names [][]byte, name []byte) bool {
	own := names[f.first:]
	if f.set == nil {
		for _, n := range own {
			if bytes.Equal(n, name) {
				return true
			}
		}
		if len(own) < linear {
			return false
		}
		f.set = make(map[uint64]int32, 4*linear)
		for j, n := range own {
			f.set[maphash.Bytes(seed, n)] = int32(f.first + j)
		}
	}
	h := maphash.Bytes(seed, name)
	j, ok := f.set[h]
	if !ok {
		f.set[h] = int32(len(names))
		return false
	}
	if bytes.Equal(names[j], name) {
		return true
	}
	// Two names with one 64-bit hash: compare with every name.
	for _, n := range own {
		if bytes.Equal(n, name) {
			return true
		}
	}
	return false
}

// stringEnd returns the index of the quote that ends the string starting
// at b[i], or len(b).
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		escapes := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return j
		}
	}
	return len(b)
}

// plain returns the raw contents of a string as its value, and false when
// they need unquote: an escape, or bytes that are not UTF-8 (which
// decoders read as U+FFFD).
func plain(s []byte) ([]byte, bool) {
	return s, bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s)
}

// unquote appends the value of the raw string contents s to dst, as
// encoding/json reads it: invalid UTF-8 and lone surrogates become U+FFFD.
func unquote(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(s[i+1:])
				if !ok {
					dst = append(dst, '\\', 'u')
					i++
					continue
				}
				i += 5
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2, ok = hex4(s[i+2:])
					}
					if pair := utf16.DecodeRune(r, r2); ok && pair != utf8.RuneError {
						dst = utf8.AppendRune(dst, pair)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // \" \\ \/
				dst = append(dst, s[i])
			}
			i++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r) // RuneError for a bad byte
			i += n
		}
	}
	return dst
}

// hex4 reads the four hex digits of a \u escape.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
