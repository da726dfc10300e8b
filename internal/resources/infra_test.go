package resources

import (
	"strings"
	"testing"
	"time"
)

func TestValidPrefix(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prefix string
		ok     bool
	}{
		{"relay", true}, {"relay-dev2", true}, {"", false}, {"Relay", false},
		{"-relay", false}, {"relay-", false}, {"relay_dev", false}, {strings.Repeat("a", 21), false},
	} {
		if err := ValidPrefix(c.prefix); (err == nil) != c.ok {
			t.Errorf("ValidPrefix(%q) = %v, want ok=%v", c.prefix, err, c.ok)
		}
	}
}

func TestLogicalName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"OPENAI_API_KEY": "OpenaiApiKey", "anthropic-key": "AnthropicKey", "K": "K"} {
		if got := LogicalName(in); got != want {
			t.Errorf("LogicalName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStreamTimeout(t *testing.T) {
	t.Parallel()
	for fn, want := range map[time.Duration]time.Duration{
		10 * time.Second: 29 * time.Second,
		29 * time.Second: 29 * time.Second,
		5 * time.Minute:  5 * time.Minute,
		20 * time.Minute: 15 * time.Minute,
	} {
		if got := StreamTimeout(fn); got != want {
			t.Errorf("StreamTimeout(%v) = %v, want %v", fn, got, want)
		}
	}
}
