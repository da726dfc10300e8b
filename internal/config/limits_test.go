package config

import (
	"strings"
	"testing"
)

func TestLimitsFromEnv(t *testing.T) {
	tests := []struct {
		rate, inflight    string
		wantRate, wantMax int
		wantErr           string
	}{
		{"", "", DefaultRateLimit, DefaultMaxInflight, ""},
		{"10", "3", 10, 3, ""},
		{"0", "0", 0, 0, ""},
		{"-1", "", 0, 0, "RELAY_RATE_LIMIT"},
		{"", "lots", 0, 0, "RELAY_MAX_INFLIGHT_BATCHES"},
	}
	for _, tt := range tests {
		t.Setenv("RELAY_RATE_LIMIT", tt.rate)
		t.Setenv("RELAY_MAX_INFLIGHT_BATCHES", tt.inflight)
		e, err := FromEnv()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q/%q: got %v, want an error naming %s", tt.rate, tt.inflight, err, tt.wantErr)
			}
			continue
		}
		if err != nil || e.RateLimit != tt.wantRate || e.MaxInflight != tt.wantMax {
			t.Errorf("%q/%q: got %d/%d, %v; want %d/%d", tt.rate, tt.inflight, e.RateLimit, e.MaxInflight, err, tt.wantRate, tt.wantMax)
		}
	}
}

func TestMaxTemplatesAndWebhooksFromEnv(t *testing.T) {
	for _, tt := range []struct {
		name  string
		def   int
		field func(Env) int
	}{
		{"RELAY_MAX_TEMPLATES", DefaultMaxTemplates, func(e Env) int { return e.MaxTemplates }},
		{"RELAY_MAX_PENDING_WEBHOOKS", DefaultMaxPendingWebhooks, func(e Env) int { return e.MaxPendingWebhooks }},
	} {
		for _, c := range []struct {
			v       string
			want    int
			wantErr bool
		}{{"", tt.def, false}, {"5", 5, false}, {"0", 0, false}, {"-2", 0, true}} {
			e, err := FromVars(func(k string) string {
				if k == tt.name {
					return c.v
				}
				return ""
			})
			if (err != nil) != c.wantErr || err == nil && tt.field(e) != c.want {
				t.Errorf("%s=%q: got %d, %v; want %d (error %v)", tt.name, c.v, tt.field(e), err, c.want, c.wantErr)
			}
		}
	}
}
