package mockup

import (
	"strings"
	"testing"
	"unicode"
)

// wordCases hold every kind of space strings.Fields knows (ASCII and the
// other unicode.IsSpace runes), runes that look like spaces but are not,
// and invalid UTF-8.
var wordCases = []string{
	"", " ", "a", " a ", "a b", "a  b", "\t\n\v\f\r a \r\n", "lorem ipsum dolor sit amet ",
	"a\u0085b", "a\u00a0b", "a\u1680b", "a\u2000b\u200ac", "a\u2028b\u2029c", "a\u202fb", "a\u205fb", "a\u3000b",
	"a\u200bb", "a\ufeffb", "a\u180eb", "a\x00b", "a\x1cb\x1fc", "é ☃ 𝄞", "\xff", "a\xffb \xc2", "\xc2\xa0", " \xc2\xa0 x",
}

func TestWordsCountsAsStringsFields(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) {
			wordCases = append(wordCases, "a"+string(r)+"b")
		}
	}
	for _, s := range wordCases {
		checkWords(t, s)
	}
}

// checkWords checks words(s) and the reply's count prompt.echo makes of
// it against strings.Fields.
func checkWords(t *testing.T, s string) {
	if got, want := words(s), len(strings.Fields(s)); got != want {
		t.Errorf("words(%q) = %d, want %d", s, got, want)
	}
	p := prompt{}
	p.addMessage("user", s)
	if reply, n := p.echo(); n != len(strings.Fields(reply)) {
		t.Errorf("echo of %q: %d words, strings.Fields %d", s, n, len(strings.Fields(reply)))
	}
}

func FuzzWords(f *testing.F) {
	for _, s := range wordCases {
		f.Add(s)
	}
	f.Fuzz(checkWords)
}

func BenchmarkWords(b *testing.B) {
	s := strings.Repeat("lorem ipsum dolor sit amet ", 150)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		words(s)
	}
}
