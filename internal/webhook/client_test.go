package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/egress"
)

// newSecret makes a tenant secret the way auth.WebhookSecret does.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func newEvent(t *testing.T, batchID string) Event {
	t.Helper()
	batch, err := json.Marshal(map[string]any{"id": batchID, "object": "batch", "status": "completed", "endpoint": "/v1/chat/completions"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := NewEvent("completed", batch, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// received is what a test receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server on 127.0.0.1 that records every request
// and answers with handle (204 when nil).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, handle http.HandlerFunc) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, received{req.Header.Clone(), body})
		r.mu.Unlock()
		if handle == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		handle(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.reqs...)
}

// port is the receiver's port, for URLs that name a host instead.
func (r *receiver) port(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// resolverTo is a resolver that answers every name with ip, over an
// in-memory pipe: no query leaves the process, and the dialer then checks
// ip as if real DNS had returned it.
func resolverTo(ip netip.Addr) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go answerDNS(server, ip)
			return client, nil
		},
	}
}

// answerDNS serves one query. A net.Pipe is not a PacketConn, so the Go
// resolver speaks DNS-over-TCP framing (a 2-byte length first). A or AAAA
// of ip's family gets ip; the other gets an empty answer.
func answerDNS(conn net.Conn, ip netip.Addr) {
	defer conn.Close()
	var n [2]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return
	}
	q := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(conn, q); err != nil {
		return
	}
	// The question: the name's labels from byte 12 up to a zero byte, then
	// 2 bytes of type and 2 of class.
	end := 12
	for end < len(q) && q[end] != 0 {
		end += 1 + int(q[end])
	}
	end += 5
	if end > len(q) {
		return
	}
	qtype := binary.BigEndian.Uint16(q[end-4:])
	var rdata []byte
	if qtype == 1 && ip.Is4() || qtype == 28 && ip.Is6() {
		rdata = ip.AsSlice()
	}
	// Header: the query's id, a recursive answer with no error, 1 question.
	msg := []byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}
	msg = append(msg, q[12:end]...)
	if rdata != nil {
		msg[7] = 1                  // one answer
		msg = append(msg, 0xc0, 12) // its name points at the question's
		msg = binary.BigEndian.AppendUint16(msg, qtype)
		msg = append(msg, 0, 1, 0, 0, 0, 60) // class IN, TTL 60 s
		msg = binary.BigEndian.AppendUint16(msg, uint16(len(rdata)))
		msg = append(msg, rdata...)
	}
	conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
}

// A receiver failing twice gets three attempts, all with the same
// webhook-id and each signed afresh.
func TestDeliverRetriesKeepTheEventID(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	rcv := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	c := NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true})
	secret := newSecret(t)
	ev := newEvent(t, "batch_retry")

	var attempts []Attempt
	for n := 1; n <= 5; n++ {
		a := c.Deliver(t.Context(), rcv.URL, secret, ev, n)
		attempts = append(attempts, a)
		if a.Delivered() || a.Permanent {
			break
		}
	}
	if len(attempts) != 3 || !attempts[2].Delivered() {
		t.Fatalf("attempts = %+v, want two failures then a delivery", attempts)
	}
	for i, r := range rcv.got() {
		if id := r.header.Get("webhook-id"); id != ev.ID {
			t.Errorf("request %d webhook-id = %q, want %q", i+1, id, ev.ID)
		}
		ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
		if err != nil {
			t.Fatalf("request %d webhook-timestamp: %v", i+1, err)
		}
		want, err := Sign(secret, ev.ID, time.Unix(ts, 0), r.body)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.header.Get("webhook-signature"); got != want.Get("webhook-signature") {
			t.Errorf("request %d webhook-signature = %q, want %q", i+1, got, want.Get("webhook-signature"))
		}
	}
	if s := Summarize(attempts, false); s.Status != StatusDelivered || s.Attempts != 3 || s.LastStatusCode == nil || *s.LastStatusCode != 200 {
		t.Errorf("summary = %+v, want delivered after 3 attempts", s)
	}
}

func TestDeliverFailures(t *testing.T) {
	t.Parallel()
	// The resolver cases below dial what a fake DNS answers; make sure the
	// check refuses 10.0.0.1 before any case could send it a packet.
	if (egress.Policy{}).Control("tcp4", "10.0.0.1:443", nil) == nil {
		t.Fatal("control allows 10.0.0.1; not running tests that would dial it")
	}

	local := egress.Policy{AllowPrivate: true, AllowHTTP: true}
	deployedHTTP := egress.Policy{AllowHTTP: true} // http only so httptest can stand in for a public receiver

	type result struct {
		delivered bool
		status    int
		errHas    []string // substrings of Attempt.Error
		permanent bool
		requests  int // how many the receiver got
	}
	for _, tt := range []struct {
		name      string
		policy    egress.Policy
		handle    http.HandlerFunc
		host      string     // a name for resolve; "" dials the receiver's 127.0.0.1 URL
		resolve   netip.Addr // what host resolves to
		timeout   time.Duration
		badSecret bool
		want      result
	}{
		{
			name:   "loopback receiver refused in a deployment",
			policy: deployedHTTP,
			want:   result{errHas: []string{"127.0.0.1", "loopback"}, permanent: true},
		},
		{
			name:    "name resolving to loopback refused at dial",
			policy:  deployedHTTP,
			host:    "hooks.example.com",
			resolve: netip.MustParseAddr("127.0.0.1"),
			want:    result{errHas: []string{"dial tcp 127.0.0.1:", "refused: loopback"}, permanent: true},
		},
		{
			name:    "name resolving to loopback delivered locally",
			policy:  local,
			host:    "hooks.example.com",
			resolve: netip.MustParseAddr("127.0.0.1"),
			want:    result{delivered: true, status: http.StatusNoContent, requests: 1},
		},
		{
			name:    "name resolving to 10.x refused at dial",
			policy:  deployedHTTP,
			host:    "internal.example.com",
			resolve: netip.MustParseAddr("10.0.0.1"),
			want:    result{errHas: []string{"dial tcp 10.0.0.1:", "refused: private"}, permanent: true},
		},
		{
			name:    "name resolving to the metadata service refused at dial",
			policy:  deployedHTTP,
			host:    "metadata.example.com",
			resolve: netip.MustParseAddr("169.254.169.254"),
			want:    result{errHas: []string{"dial tcp 169.254.169.254:", "refused: link-local"}, permanent: true},
		},
		{
			name:   "redirect not followed",
			policy: local,
			handle: func(w http.ResponseWriter, r *http.Request) {
				// Back to this receiver, so a followed redirect would show as a second request.
				http.Redirect(w, r, "http://"+r.Host+"/latest/meta-data/", http.StatusFound)
			},
			want: result{status: http.StatusFound, errHas: []string{"not followed", "http://127.0.0.1:"}, requests: 1},
		},
		{
			name:   "server error",
			policy: local,
			handle: func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, strings.Repeat("x", 1<<20), http.StatusInternalServerError)
			},
			want: result{status: http.StatusInternalServerError, errHas: []string{"500 Internal Server Error"}, requests: 1},
		},
		{
			name:    "receiver never answers",
			policy:  local,
			timeout: 50 * time.Millisecond,
			handle:  func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			want:    result{errHas: []string{"no answer within 50ms"}, requests: 1},
		},
		{
			name:   "http in a deployment",
			policy: egress.Policy{AllowPrivate: true},
			want:   result{errHas: []string{"https"}, permanent: true},
		},
		{
			name:      "unusable secret",
			policy:    local,
			badSecret: true,
			want:      result{errHas: []string{"webhook secret"}, permanent: true},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, tt.handle)
			c := NewClient(tt.policy)
			c.Timeout = tt.timeout
			target := rcv.URL + "/hook"
			if tt.host != "" {
				c.Resolver = resolverTo(tt.resolve)
				target = "http://" + net.JoinHostPort(tt.host, rcv.port(t)) + "/hook"
			}
			secret := newSecret(t)
			if tt.badSecret {
				secret = "not-a-secret"
			}

			a := c.Deliver(t.Context(), target, secret, newEvent(t, "batch_x"), 1)

			if a.Delivered() != tt.want.delivered || a.StatusCode != tt.want.status || a.Permanent != tt.want.permanent {
				t.Errorf("attempt = %+v, want delivered %v, status %d, permanent %v", a, tt.want.delivered, tt.want.status, tt.want.permanent)
			}
			for _, s := range tt.want.errHas {
				if !strings.Contains(a.Error, s) {
					t.Errorf("error %q does not mention %q", a.Error, s)
				}
			}
			if tt.want.delivered && a.Error != "" {
				t.Errorf("delivered with error %q", a.Error)
			}
			if n := len(rcv.got()); n != tt.want.requests {
				t.Errorf("receiver got %d requests, want %d", n, tt.want.requests)
			}
		})
	}
}

// A receiver that never answers holds an attempt (and a webhook function)
// at most 5 s by default (docs/api.md "Webhooks"), not the 10 s it once did:
// the attempt's request carries a deadline 5 s after it starts. (That an
// attempt ends at its deadline is TestDeliver's "receiver never answers".)
func TestDeliverDefaultTimeout(t *testing.T) {
	t.Parallel()
	c := NewClient(egress.Policy{AllowPrivate: true, AllowHTTP: true})
	var deadline time.Time
	var ok bool
	c.HTTP.Transport = roundTripper(func(r *http.Request) (*http.Response, error) {
		deadline, ok = r.Context().Deadline()
		return nil, errors.New("not sent")
	})
	start := time.Now()
	c.Deliver(context.Background(), "http://127.0.0.1:1/hook", newSecret(t), newEvent(t, "batch_slow"), 1)
	end := time.Now()
	if !ok || deadline.Before(start.Add(5*time.Second)) || deadline.After(end.Add(5*time.Second)) {
		t.Fatalf("attempt started %s, ended %s, its request's deadline %s (set: %v): want 5 s after its start",
			start.Format(time.StampMicro), end.Format(time.StampMicro), deadline.Format(time.StampMicro), ok)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
