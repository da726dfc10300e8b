package provider

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/ratelimit"
)

func pooledClient(t *testing.T, baseURL string) *Client {
	t.Helper()
	ms, err := config.ParseModels([]byte(strings.ReplaceAll(`
models:
  - {name: pooled, provider: openai, base_url: BASE/v1, api_key_envs: [KEY_A, KEY_B]}
`, "BASE", baseURL)))
	if err != nil {
		t.Fatal(err)
	}
	s := &sleeps{}
	return &Client{HTTP: NewHTTPClient(), Models: ms, Keys: mapKeys{"KEY_A": "sk-a", "KEY_B": "sk-b"},
		Policy: Policy{Sleep: s.Sleep}, Limits: &ratelimit.Registry{}}
}

// A key the upstream refuses (401) is dropped from its pool: the row goes
// to the other key, the refused attempt not counted, and later rows go
// only to the key that works.
func TestDoKeyPoolDropsARefusedKey(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-a" {
			answer(401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)(w, r)
			return
		}
		answer(200, `{"id":"x","object":"chat.completion","choices":[]}`)(w, r)
	})
	up.steps = append(up.steps, times(10, up.steps[0])...)
	c := pooledClient(t, up.URL)
	body := []byte(`{"model":"pooled","messages":[{"role":"user","content":"hi"}]}`)
	for i := range 4 {
		res := c.Do(context.Background(), "/v1/chat/completions", body, Route{})
		if res.StatusCode != 200 || res.Attempts != 1 {
			t.Fatalf("row %d: status %d attempts %d (%s), want 200 after one counted attempt", i, res.StatusCode, res.Attempts, res.ErrMessage)
		}
	}
	var onA int
	for _, r := range up.requests() {
		if r.Header.Get("Authorization") == "Bearer sk-a" {
			onA++
		}
	}
	if onA != 1 {
		t.Fatalf("%d requests on the refused key, want 1: it is dropped at its first 401", onA)
	}
	m, _ := c.Models.Lookup("pooled")
	st := c.Limits.For(m).States()
	if st[0].State != "dropped" || st[1].State != "live" {
		t.Fatalf("states %+v", st)
	}
}

// With every key refused but one, the last one's 401 is the row's answer.
func TestDoKeyPoolKeepsItsLastKey(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, times(3, answer(401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`))...)
	c := pooledClient(t, up.URL)
	body := []byte(`{"model":"pooled","messages":[{"role":"user","content":"hi"}]}`)
	res := c.Do(context.Background(), "/v1/chat/completions", body, Route{})
	if res.StatusCode != 401 || len(up.requests()) != 2 {
		t.Fatalf("status %d after %d requests, want the 401 after one per key", res.StatusCode, len(up.requests()))
	}
}
