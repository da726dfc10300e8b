//go:build sdk

// The test that verifies a delivery with the official openai-go client,
// behind the build tag sdk, which make test and make vet set (the
// Makefile's TEST_TAGS) and make unit does not, so that make unit does not
// link the SDK (README "Tests").

package webhook

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/relaybatch/relay/internal/egress"
)

func TestDeliverVerifiesWithOpenAISDK(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	rcv := newReceiver(t, nil)
	ev := newEvent(t, "batch_abc123")

	a := NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true}).Deliver(t.Context(), rcv.URL+"/hook", secret, ev, 1)
	if !a.Delivered() || a.StatusCode != http.StatusNoContent || a.N != 1 || a.At == 0 {
		t.Fatalf("attempt = %+v, want attempt 1 delivered with 204", a)
	}
	got := rcv.got()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	req := got[0]
	for name, want := range map[string]string{
		"Content-Type": "application/json",
		"User-Agent":   "relay-batch-webhooks/1",
		"webhook-id":   ev.ID,
	} {
		if v := req.header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}

	client := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	for _, tt := range []struct {
		name    string
		body    []byte
		secret  string
		wantErr bool
	}{
		{"as sent", req.body, secret, false},
		{"tampered body", bytes.Replace(req.body, []byte("batch_abc123"), []byte("batch_abc124"), 1), secret, true},
		{"another tenant's secret", req.body, newSecret(t), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			unwrapped, err := client.Webhooks.Unwrap(tt.body, req.header, option.WithWebhookSecret(tt.secret))
			if tt.wantErr {
				if err == nil {
					t.Fatal("Unwrap verified a body it should refuse")
				}
				return
			}
			if err != nil {
				t.Fatalf("Unwrap: %v", err)
			}
			done := unwrapped.AsBatchCompleted()
			if done.Type != "batch.completed" || done.ID != ev.ID || done.Data.ID != "batch_abc123" {
				t.Errorf("unwrapped %s %s for %s, want batch.completed %s for batch_abc123", done.Type, done.ID, done.Data.ID, ev.ID)
			}
		})
	}
}
