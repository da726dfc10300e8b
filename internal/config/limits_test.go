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

// The stack's Object Lock option reaches the functions as a mode and a
// number of days; anything else is refused at start.
func TestAuditLockFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode, days string
		wantMode   string
		wantDays   int
		wantErr    string
	}{
		{"", "", "", 0, ""},
		{"COMPLIANCE", "400", "COMPLIANCE", 400, ""},
		{"GOVERNANCE", "30", "GOVERNANCE", 30, ""},
		{"governance", "30", "", 0, "RELAY_AUDIT_LOCK_MODE"},
		{"COMPLIANCE", "", "", 0, "RELAY_AUDIT_LOCK_DAYS"},
		{"COMPLIANCE", "0", "", 0, "RELAY_AUDIT_LOCK_DAYS"},
	} {
		vars := map[string]string{"RELAY_AUDIT_LOCK_MODE": tt.mode, "RELAY_AUDIT_LOCK_DAYS": tt.days}
		e, err := FromVars(func(k string) string { return vars[k] })
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q/%q: got %v, want an error naming %s", tt.mode, tt.days, err, tt.wantErr)
			}
			continue
		}
		if err != nil || e.AuditLockMode != tt.wantMode || e.AuditLockDays != tt.wantDays {
			t.Errorf("%q/%q: got %q/%d, %v", tt.mode, tt.days, e.AuditLockMode, e.AuditLockDays, err)
		}
	}
}
