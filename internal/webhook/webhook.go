// Package webhook owns completion webhooks (docs/api.md "Webhooks"): the event a batch's
// terminal state (or a lifecycle event before it) produces, its Standard Webhooks signature, one HTTP
// delivery attempt under the address policy that keeps deliveries off
// private networks (internal/egress, SSRF), and the retry schedule with its
// summary (batch.WebhookSummary).
//
// It holds no state: the caller keeps the Event (so every retry carries the
// same webhook-id, which receivers dedupe on), the list of Attempts, and
// decides when to try again with Backoff and GiveUp.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/ids"
)

// Event is OpenAI's webhook event shape, carrying the whole Batch object.
type Event struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"`
	Type      string          `json:"type"`
	CreatedAt int64           `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// The events a batch sends before its terminal one, in this order
// (docs/api.md "Webhooks"): queued once its input is validated, in_progress
// when its first chunk starts.
const (
	Queued     = "queued"
	InProgress = "in_progress"
)

// NewEvent makes the event batch.<status> of a batch that reached the
// terminal status (completed, failed, expired or cancelled), or of a
// lifecycle event before it (Queued, InProgress); batch is the Batch
// object as clients see it.
func NewEvent(status string, batch json.RawMessage, now time.Time) (Event, error) {
	switch status {
	case "completed", "failed", "expired", "cancelled", Queued, InProgress:
	default:
		return Event{}, fmt.Errorf("webhook event for status %q: only terminal states, queued and in_progress send one", status)
	}
	// The body is signed as marshalled; an invalid Data would fail there,
	// far from the bug that produced it.
	if !json.Valid(batch) {
		return Event{}, errors.New("webhook event: batch is not valid JSON")
	}
	return Event{
		ID:        ids.New("evt_"),
		Object:    "event",
		Type:      "batch." + status,
		CreatedAt: now.Unix(),
		Data:      batch,
	}, nil
}

// Terminal reports whether an event type is a terminal state's
// (batch.completed, …), not a lifecycle event before it.
func Terminal(eventType string) bool {
	return eventType != "batch."+Queued && eventType != "batch."+InProgress
}

// Record names the delivery record of an event of type eventType sent to
// endpoint: the event type itself for the batch's own webhook_url
// (endpoint ""), <endpoint>/<type> for an operator endpoint's (docs/api.md
// "Operator webhooks"), whose names have no slash.
func Record(endpoint, eventType string) string {
	if endpoint == "" {
		return eventType
	}
	return endpoint + "/" + eventType
}

// SplitRecord returns the endpoint and the event type of a Record name.
func SplitRecord(record string) (endpoint, eventType string) {
	if e, t, ok := strings.Cut(record, "/"); ok {
		return e, t
	}
	return "", record
}

// OperatorCircuit names the circuit of operator endpoint name's receiver at
// target: one for every tenant's events, as the endpoint is the
// operator's; a tenant name has no slash, so none shares it.
func OperatorCircuit(name, target string) string {
	return CircuitOf("operator/"+name, target)
}

// Header names of Standard Webhooks.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix marks a Standard Webhooks symmetric secret.
const secretPrefix = "whsec_"

// minSecretBytes is the Standard Webhooks minimum key size; the OpenAI
// SDKs refuse shorter keys, so signing with one would send webhooks no
// receiver can verify.
const minSecretBytes = 24

// Sign returns the Standard Webhooks headers for body sent as event id at
// ts: webhook-signature is "v1," and the base64 HMAC-SHA256, keyed with the
// decoded secret, of id + "." + unix seconds + "." + body.
func Sign(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return nil, err
	}
	unix := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + unix + "."))
	mac.Write(body)
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, unix)
	h.Set(HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return h, nil
}

// decodeSecret returns the key bytes of a whsec_ secret. Errors never
// quote the secret: they end up in attempt records.
func decodeSecret(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, errors.New("webhook secret: want whsec_<base64>")
	}
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, errors.New("webhook secret: the part after whsec_ is not standard base64")
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("webhook secret: %d bytes, want at least %d", len(key), minSecretBytes)
	}
	return key, nil
}
