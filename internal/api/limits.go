package api

import (
	"context"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
)

// RequestCounter counts an API key's requests per second; the DynamoDB
// store implements it (store.CountRequest).
type RequestCounter interface {
	CountRequest(ctx context.Context, keyID string, second int64) (int64, error)
}

// RateLimiter bounds the requests of each API key to PerSecond in every
// second (a fixed window), for all instances of the API together: the
// count lives in DynamoDB, since each Lambda instance has memory of its own
// and there are as many of them as concurrent requests. API Gateway's stage
// throttling is the coarser bound in front of it, on all keys together.
type RateLimiter struct {
	Counter   RequestCounter
	PerSecond int
	Log       *slog.Logger
	Now       func() time.Time // the clock (required)
}

// NewRateLimiter limits each key to perSecond requests per second; a
// perSecond of 0 or less returns nil, which limits nothing.
func NewRateLimiter(c RequestCounter, perSecond int, log *slog.Logger) *RateLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &RateLimiter{Counter: c, PerSecond: perSecond, Log: log, Now: time.Now}
}

// Allow counts one request of keyID and refuses it (429, Retry-After) when
// the key has used up the current second. When the count cannot be taken
// the request goes through: the limit protects the service from one noisy
// key, and a DynamoDB that cannot count would fail the request anyway.
func (l *RateLimiter) Allow(ctx context.Context, keyID string) error {
	if l == nil {
		return nil
	}
	n, err := l.Counter.CountRequest(ctx, keyID, l.Now().Unix())
	if err != nil {
		if l.Log != nil {
			l.Log.WarnContext(ctx, "rate limit not checked", "key_id", keyID, "err", err)
		}
		return nil
	}
	if n > int64(l.PerSecond) {
		return &errs.Error{
			Kind: errs.RateLimited, Code: "rate_limit_exceeded", RetryAfter: 1,
			Message: fmt.Sprintf("rate limit reached for this API key: at most %d requests per second; retry after 1 second", l.PerSecond),
		}
	}
	return nil
}

// limit applies the rate limit to an authenticated request.
func (a *API) limit(ctx context.Context, p auth.Principal) error {
	return a.Limiter.Allow(ctx, p.KeyID)
}

// maxDepth bounds how deeply a JSON request body may nest. encoding/json
// stops at 10,000 levels; real requests (messages, tools, JSON schemas)
// stay within a few dozen, and a shallow bound turns a pathological body
// into a clear 400 before anything walks it.
const maxDepth = 64

// checkJSONBody refuses, before decoding, a body that is not UTF-8 (JSON
// must be, and encoding/json would quietly turn bad bytes into U+FFFD, or
// keep them in a json.RawMessage) or that nests too deeply.
func checkJSONBody(body []byte) error {
	if !utf8.Valid(body) {
		return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "the request body is not valid UTF-8 (at byte %d): JSON must be UTF-8", invalidUTF8At(body))
	}
	return checkDepth(body, maxDepth)
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// checkDepth refuses JSON nested deeper than max arrays and objects. It
// only counts: syntax is the decoder's to judge.
func checkDepth(body []byte, max int) error {
	depth, inString := 0, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return errs.E(errs.Invalid, errs.CodeInvalidJSON, "", "the JSON body nests deeper than %d levels (at byte %d)", max, i)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}
