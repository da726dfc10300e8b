package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/ids"
)

func TestSign(t *testing.T) {
	t.Parallel()
	// A key computed by hand from the Standard Webhooks formula:
	// base64(HMAC-SHA256(key, id + "." + ts + "." + body)).
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i + 1)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(`evt_1.1700000000.{"a":1}`))
	byHand := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))

	for _, tt := range []struct {
		name   string
		secret string
		id     string
		ts     int64
		body   string
		want   string
	}{
		{
			// The signing test vector of the Standard Webhooks reference libraries.
			name:   "standard webhooks vector",
			secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			id:     "msg_p5jXN8AQM9LWM0D4loKWxJek",
			ts:     1614265330,
			body:   `{"test": 2432232314}`,
			want:   "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		},
		{
			name:   "by hand",
			secret: "whsec_" + base64.StdEncoding.EncodeToString(key),
			id:     "evt_1",
			ts:     1700000000,
			body:   `{"a":1}`,
			want:   byHand,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := Sign(tt.secret, tt.id, time.Unix(tt.ts, 0), []byte(tt.body))
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			for name, want := range map[string]string{
				"webhook-id":        tt.id,
				"webhook-timestamp": strconv.FormatInt(tt.ts, 10),
				"webhook-signature": tt.want,
			} {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestSignRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, secret, want string
	}{
		{"no prefix", base64.StdEncoding.EncodeToString(make([]byte, 32)), "whsec_"},
		{"not base64", "whsec_***", "base64"},
		{"url base64", "whsec_" + base64.URLEncoding.EncodeToString([]byte(strings.Repeat("\xff", 30))), "base64"},
		{"too short", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)), "at least 24"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Sign(tt.secret, "evt_1", time.Unix(1, 0), []byte("{}"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Sign error = %v, want one mentioning %q", err, tt.want)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(tt.secret, "whsec_")) {
				t.Errorf("error %q quotes the secret", err)
			}
		})
	}
}

func TestNewEvent(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	batch := json.RawMessage(`{"id":"batch_1","object":"batch","status":"completed"}`)
	for _, tt := range []struct {
		status   string
		batch    json.RawMessage
		wantType string // "" when an error is wanted
	}{
		{"completed", batch, "batch.completed"},
		{"failed", batch, "batch.failed"},
		{"expired", batch, "batch.expired"},
		{"cancelled", batch, "batch.cancelled"},
		{"queued", batch, "batch.queued"},
		{"in_progress", batch, "batch.in_progress"},
		{"validating", batch, ""},
		{"cancelling", batch, ""},
		{"completed", json.RawMessage(`{"id":`), ""},
	} {
		t.Run(tt.status, func(t *testing.T) {
			t.Parallel()
			ev, err := NewEvent(tt.status, tt.batch, now)
			if tt.wantType == "" {
				if err == nil {
					t.Fatalf("NewEvent(%q, %s) = %+v, want an error", tt.status, tt.batch, ev)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewEvent: %v", err)
			}
			if ev.Type != tt.wantType || ev.Object != "event" || ev.CreatedAt != now.Unix() || !ids.Valid("evt_", ev.ID) {
				t.Errorf("got %+v, want type %s, object event, created_at %d, an evt_ id", ev, tt.wantType, now.Unix())
			}
			if string(ev.Data) != string(tt.batch) {
				t.Errorf("data = %s, want %s", ev.Data, tt.batch)
			}
		})
	}
}
