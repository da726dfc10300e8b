package mockup

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The provider's rate limits (Options.RPM, TPM, RateWindow): each API key
// has a sliding window of the requests it was admitted and their tokens;
// a request that would take either over the limit is answered 429 and not
// counted. Every answer to a limited key carries the provider's rate-limit
// headers.

// keyOf is the API key a request was made with, as the limits count it:
// the bearer token or x-api-key.
func keyOf(r *http.Request) string {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(token)
	}
	return strings.TrimSpace(r.Header.Get("x-api-key"))
}

// window is one key's admitted requests in the last Options.RateWindow,
// oldest first.
type window struct{ events []admitted }

type admitted struct {
	at     time.Time
	tokens int
}

// rateLimits are the limits in one window of o (RPM and TPM scaled from a
// minute to RateWindow, never below 1), and whether any applies.
func (o Options) rateLimits() (requests, tokens int, ok bool) {
	scale := func(perMinute int) int {
		if perMinute <= 0 {
			return 0
		}
		return max(1, int(int64(perMinute)*int64(o.RateWindow)/int64(time.Minute)))
	}
	requests, tokens = scale(o.RPM), scale(o.TPM)
	return requests, tokens, requests > 0 || tokens > 0
}

// rateState is what the rate-limit headers of one answer say.
type rateState struct {
	limited                  bool // the key has limits: the headers are sent
	rpm, tpm                 int  // the limits a minute (Options.RPM, TPM)
	reqLimit, reqRemaining   int
	tokLimit, tokRemaining   int
	reqReset, tokReset       time.Duration // until the window is empty of requests / tokens
	retryAfter               time.Duration // a 429's: until this request would fit
	overRequests, overTokens bool
}

// admit counts a request of cost tokens against key's window, or refuses
// it, under the limits of o at now.
func (s *Server) admit(key string, cost int, o Options, now time.Time) rateState {
	reqLimit, tokLimit, ok := o.rateLimits()
	if !ok {
		return rateState{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[key]
	if w == nil {
		w = &window{}
		s.windows[key] = w
	}
	cut := 0
	for cut < len(w.events) && !w.events[cut].at.After(now.Add(-o.RateWindow)) {
		cut++
	}
	w.events = w.events[cut:]
	used := 0
	for _, e := range w.events {
		used += e.tokens
	}
	st := rateState{limited: true, reqLimit: reqLimit, tokLimit: tokLimit, rpm: o.RPM, tpm: o.TPM}
	st.overRequests = reqLimit > 0 && len(w.events)+1 > reqLimit
	st.overTokens = tokLimit > 0 && used+cost > tokLimit
	if st.overRequests || st.overTokens {
		st.retryAfter = w.waitFor(now, o.RateWindow, reqLimit, tokLimit, cost)
	} else {
		w.events = append(w.events, admitted{now, cost})
		used += cost
	}
	st.reqRemaining = max(reqLimit-len(w.events), 0)
	st.tokRemaining = max(tokLimit-used, 0)
	if n := len(w.events); n > 0 {
		st.reqReset = w.events[n-1].at.Add(o.RateWindow).Sub(now)
		st.tokReset = st.reqReset
	}
	return st
}

// waitFor is how long until a request of cost tokens fits in w: until
// enough of its oldest requests leave the window.
func (w *window) waitFor(now time.Time, span time.Duration, reqLimit, tokLimit, cost int) time.Duration {
	n, used := len(w.events), 0
	for _, e := range w.events {
		used += e.tokens
	}
	for i, e := range w.events {
		if (reqLimit == 0 || n-i+1 <= reqLimit) && (tokLimit == 0 || used+cost <= tokLimit) {
			if i == 0 {
				return 0
			}
			return w.events[i-1].at.Add(span).Sub(now)
		}
		used -= e.tokens
	}
	if n == 0 {
		return span // over the token limit on its own: it never fits
	}
	return w.events[n-1].at.Add(span).Sub(now)
}

// tokenCost is what a request counts against the TPM: its prompt tokens
// plus max_tokens when it sets one (as providers reserve them at
// admission), else the reply's output tokens.
func tokenCost(req *request, reply object) int {
	usage, _ := reply["usage"].(object)
	in, out := 0, 0
	for _, k := range []string{"prompt_tokens", "input_tokens"} {
		if n, ok := usage[k].(int); ok {
			in = n
		}
	}
	for _, k := range []string{"completion_tokens", "output_tokens"} {
		if n, ok := usage[k].(int); ok {
			out = n
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if n, ok := req.body[k].(float64); ok && n > 0 {
			out = int(n)
		}
	}
	return in + out
}

// setRateHeaders writes the provider's rate-limit headers of st, as the
// providers state them: the limit a minute's (RPM, TPM) and what remains
// of it, the window's counts scaled to a minute.
func setRateHeaders(h http.Header, sh shape, st rateState, now time.Time) {
	if !st.limited {
		return
	}
	st.reqLimit, st.reqRemaining = perMinute(st.rpm, st.reqLimit, st.reqRemaining)
	st.tokLimit, st.tokRemaining = perMinute(st.tpm, st.tokLimit, st.tokRemaining)
	switch sh {
	case shapeOpenAI:
		if st.reqLimit > 0 {
			h.Set("x-ratelimit-limit-requests", strconv.Itoa(st.reqLimit))
			h.Set("x-ratelimit-remaining-requests", strconv.Itoa(st.reqRemaining))
			h.Set("x-ratelimit-reset-requests", resetString(st.reqReset))
		}
		if st.tokLimit > 0 {
			h.Set("x-ratelimit-limit-tokens", strconv.Itoa(st.tokLimit))
			h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(st.tokRemaining))
			h.Set("x-ratelimit-reset-tokens", resetString(st.tokReset))
		}
	case shapeAnthropic:
		// Anthropic gives the reset as an RFC 3339 time.
		if st.reqLimit > 0 {
			h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(st.reqLimit))
			h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(st.reqRemaining))
			h.Set("anthropic-ratelimit-requests-reset", now.Add(st.reqReset).UTC().Format(time.RFC3339Nano))
		}
		if st.tokLimit > 0 {
			h.Set("anthropic-ratelimit-tokens-limit", strconv.Itoa(st.tokLimit))
			h.Set("anthropic-ratelimit-tokens-remaining", strconv.Itoa(st.tokRemaining))
			h.Set("anthropic-ratelimit-tokens-reset", now.Add(st.tokReset).UTC().Format(time.RFC3339Nano))
		}
	}
}

// resetString is OpenAI's form of a reset: "1s", "6m0s", "250ms".
func resetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Millisecond).String()
}

// limitMessage is the 429's message, naming the limit as the providers do.
func (st rateState) limitMessage(key string) string {
	what, limit := "requests", st.reqLimit
	if !st.overRequests {
		what, limit = "tokens", st.tokLimit
	}
	return fmt.Sprintf("Rate limit reached for %s on key …%s: limit %d per window (mockup: Options.RPM/TPM)", what, tail(key), limit)
}

func tail(key string) string {
	if len(key) > 4 {
		return key[len(key)-4:]
	}
	return key
}

// perMinute is a window's limit and what remains of it as a minute's,
// the minute's limit being perMinute.
func perMinute(perMinute, limit, remaining int) (int, int) {
	if limit <= 0 {
		return 0, 0
	}
	return perMinute, remaining * perMinute / limit
}
