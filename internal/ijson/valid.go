package ijson

import "encoding/binary"

// Valid reports whether b is one JSON value with optional white space
// around it: exactly what encoding/json.Valid accepts (FuzzValid compares
// the two), only faster on the long strings of chat rows, which it skips
// eight bytes at a time where encoding/json steps a state machine through
// every byte. Like encoding/json, it does not check UTF-8 (a row's UTF-8 is
// checked apart), and it refuses nesting deeper than maxDepth.
func Valid(b []byte) bool {
	var openBuf [64]bool
	open := openBuf[:0] // the arrays and objects i is in, innermost last: true for an object
	i := 0
	for {
		// A value: a whole one, or the opening of an array or object
		// (and its first member's name), after which its first value
		// follows.
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		if c := b[i]; c == '{' || c == '[' {
			if len(open) == maxDepth {
				return false
			}
			i = skipSpace(b, i+1)
			if i >= len(b) || b[i] != c+2 { // c+2 is '}' or ']'
				open = append(open, c == '{')
				if c == '{' {
					i = name(b, i)
				}
				if i < 0 {
					return false
				}
				continue
			}
			i++ // an empty one
		} else if i = scalar(b, i); i < 0 {
			return false
		}
		// After a value: the closing brackets it ends, then a comma (and
		// in an object the next member's name) or the end of the input.
		var more bool
		if i, open, more = after(b, i, open); !more {
			return i == len(b)
		}
	}
}

// maxDepth is encoding/json's limit on nested arrays and objects.
const maxDepth = 10000

// after reads what follows a value at b[i] inside open: closing brackets,
// then a comma and, in an object, the next member's name. It reports
// whether a value follows, and otherwise returns len(b) at the valid end
// of the input, something less on a syntax error.
func after(b []byte, i int, open []bool) (int, []bool, bool) {
	for {
		i = skipSpace(b, i)
		if len(open) == 0 {
			return i, open, false
		}
		if i >= len(b) {
			return -1, open, false
		}
		object := open[len(open)-1]
		switch c := b[i]; {
		case c == ',' && object:
			i = name(b, skipSpace(b, i+1))
			return i, open, i >= 0
		case c == ',':
			return i + 1, open, true
		case object && c == '}', !object && c == ']':
			i++
			open = open[:len(open)-1]
		default:
			return -1, open, false
		}
	}
}

// name reads a member's name at b[i] and the colon after it, and returns
// the index past them, or -1.
func name(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = validString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return i + 1
}

// scalar reads a string, number, true, false or null at b[i], and returns
// the index past it, or -1.
func scalar(b []byte, i int) int {
	switch b[i] {
	case '"':
		return validString(b, i)
	case 't':
		return literal(b, i, "true")
	case 'f':
		return literal(b, i, "false")
	case 'n':
		return literal(b, i, "null")
	}
	return number(b, i)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// isSpace is JSON's white space, the only one encoding/json skips.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// validString returns the index past the string whose opening quote is
// b[i], or -1.
func validString(b []byte, i int) int {
	for i++; ; {
		i = plainRun(b, i)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			n := escapeLen(b[i+1:])
			if n == 0 {
				return -1
			}
			i += 1 + n
		default: // a control character: it must be escaped
			return -1
		}
	}
}

// plainRun returns the index of the first byte at or after b[i] that ends
// a run of plain string bytes: a quote, a backslash or a control
// character, or len(b). It tests eight bytes at a time with the bit tricks
// of "Bit Twiddling Hacks" (determine if a word has a byte less than n):
// for a word x, (x - 0x01…01·n) & ^x & 0x80…80 is non-zero exactly when
// some byte of x is less than n (n ≤ 128), and a byte equal to q is a zero
// byte of x ^ 0x01…01·q.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		if ((x-ones*0x20)&^x|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0 {
			break
		}
	}
	for i < len(b) && b[i] >= 0x20 && b[i] != '"' && b[i] != '\\' {
		i++
	}
	return i
}

// escapeLen returns the length of the escape whose backslash precedes e,
// not counting the backslash, or 0 when it is no JSON escape.
func escapeLen(e []byte) int {
	if len(e) == 0 {
		return 0
	}
	switch e[0] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 1
	case 'u':
		if _, ok := hex4(e[1:]); ok {
			return 5
		}
	}
	return 0
}

// literal reads the word true, false or null at b[i], and returns the
// index past it, or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number reads a number at b[i], -? (0 | [1-9][0-9]*) (. [0-9]+)?
// ([eE] [+-]? [0-9]+)?, and returns the index past it, or -1.
func number(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		i = digits(b, i)
	}
	return i
}

// digits returns the index past the digits at b[i], or -1 when there are
// none.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}
