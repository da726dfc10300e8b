//go:build bench

package localstack

// The provider-limits scenario of `make bench` (docs/design.md "Rate
// budgets"): one batch on a model whose key the mock limits by requests
// and tokens a minute, both halved mid-batch as a provider moving a key
// to a lower tier would. TestEndToEndBenchmark runs it with the others;
// TestRateLimitBenchmark runs it alone and rewrites only its section of
// BENCHMARKS.md:
//
//	go test -tags bench -run '^TestRateLimitBenchmark$' -count=1 -v ./localstack

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/mockup"
)

// limitCommand runs the scenario alone.
const limitCommand = "go test -tags bench -run '^TestRateLimitBenchmark$' -count=1 -v ./localstack"

// The scenario: the model is told the first tier (rpm, tpm in relay.yaml);
// the mock enforces it in a 10 s sliding window, then the second after
// limitSwitchAt rows were answered. A row costs 20 tokens at the mock (4
// of prompt, max_tokens 16), so the requests are the binding limit in both
// tiers: 100 rows a second, then 50. The requests in flight when the
// limits fall, and those sent before the first 429 comes back, are
// refused whatever the pace (about 2 × 100 a second × 100 ms: 20 to 30):
// 4,000 rows make them under 1% with room, the rest at 50 a second (68 s);
// BENCH_LIMIT_ROWS runs another number (the 10,000: 3 minutes).
const (
	limitRows     = 4000
	limitSwitchAt = 600
	limitRPM1     = 6000
	limitTPM1     = 150_000
	limitRPM2     = 3000
	limitTPM2     = 75_000
	limitRowCost  = 20
	limitWindow   = 10 * time.Second

	bar429PerThousand = 10.0 // 1% of the rows
	barLimitRatio     = 1.15 // wall time ÷ the paced ideal
)

const limitModels = `
models:
  - {name: limited, provider: openai, base_url: http://MOCK/v1, api_key_env: RELAY_TEST_KEY, max_concurrency: 32, timeout: 30s, rpm: 6000, tpm: 150000}
`

// limitFigures is what the scenario measured.
type limitFigures struct {
	rows         int // limitRows, or BENCH_LIMIT_ROWS
	at           time.Time
	status       string
	completed    int64
	requests     int64         // at the mock
	limited      int64         // answered 429
	limitedAfter int64         // of them, after the switch
	switchedAt   int64         // rows answered 200 when the limits were halved
	wall         time.Duration // create to the get that saw the batch terminal
	ideal        time.Duration // rows ÷ limit, each tier's rows at its limit, and the window's drain
}

// perRate is the rows a second tier (rpm, tpm) admits of rows costing
// limitRowCost tokens.
func perRate(rpm, tpm int) float64 {
	return min(float64(rpm)/60, float64(tpm)/60/limitRowCost)
}

// runLimitBench runs the scenario on a runtime of its own at the shipped
// defaults (chunk size, tick), the mock answering after benchLatency.
func runLimitBench(t *testing.T) limitFigures {
	t.Helper()
	first := mockup.Options{RPM: limitRPM1, TPM: limitTPM1, RateWindow: limitWindow, Latency: benchLatency, Record: true}
	rt := pacedRuntime(t, limitModels, first)
	c, _ := client(t, rt, "bench-limits")
	var in bytes.Buffer
	rows := envInt(t, "BENCH_LIMIT_ROWS", limitRows, limitSwitchAt+1)
	for i := range rows {
		// Three words and one for the message, and max_tokens 16.
		fmt.Fprintf(&in, `{"custom_id":"r%04d","method":"POST","url":"/v1/chat/completions","body":{"model":"limited","max_tokens":16,"messages":[{"role":"user","content":"limits row %d"}]}}`+"\n", i, i)
	}
	f := upload(t, c, "limits.jsonl", in.Bytes())
	rt.Mock.Reset()
	start := time.Now()
	id := createBatch(t, c, f.ID).ID
	waitMock(t, rt, fmt.Sprintf("%d rows answered", limitSwitchAt), func(s mockup.Stats) bool { return s.ByStatus[200] >= limitSwitchAt })
	second := first
	second.RPM, second.TPM = limitRPM2, limitTPM2
	rt.Mock.SetOptions(second)
	at := rt.Mock.Stats()
	b, _ := getUntilTerminal(t, c, id, time.Now().Add(5*time.Minute))
	wall := time.Since(start)
	st := rt.Mock.Stats()
	logTimeline(t, rt.Mock.Requests(), start)
	n1 := at.ByStatus[200]
	r1, r2 := perRate(limitRPM1, limitTPM1), perRate(limitRPM2, limitTPM2)
	ideal := float64(n1)/r1 + drain(n1, r1, r2) + float64(int64(rows)-n1)/r2
	return limitFigures{
		rows: rows, at: time.Now(), status: string(b.Status), completed: b.RequestCounts.Completed,
		requests: st.Requests, limited: st.ByStatus[429], limitedAfter: st.ByStatus[429] - at.ByStatus[429], switchedAt: n1,
		wall: wall, ideal: time.Duration(ideal * float64(time.Second)),
	}
}

// drain is how long, after the limits fall from r1 to r2 a second, no
// request fits: the window holds what it admitted in the last
// limitWindow (the n1 rows so far at most, at r1), and admits again once
// fewer than r2 × limitWindow remain in it. No client can send then.
func drain(n1 int64, r1, r2 float64) float64 {
	w := limitWindow.Seconds()
	if r2 >= r1 || float64(n1) <= r2*w {
		return 0
	}
	return w * (1 - r2/r1)
}

func (l limitFigures) perThousand() float64 { return float64(l.limited) * 1000 / float64(l.rows) }
func (l limitFigures) ratio() float64       { return l.wall.Seconds() / l.ideal.Seconds() }

func (l limitFigures) figures() []figure {
	return []figure{
		{"Provider limits: batch result", fmt.Sprintf("%s, %d rows completed", l.status, l.completed), fmt.Sprintf("completed, %d rows", l.rows),
			l.status == "completed" && l.completed == int64(l.rows)},
		{"Provider limits: 429s per 1,000 rows", fmt.Sprintf("%.1f (%d of %d requests)", l.perThousand(), l.limited, l.requests),
			fmt.Sprintf("≤ %.0f", bar429PerThousand), l.perThousand() <= bar429PerThousand},
		{"Provider limits: wall time ÷ paced ideal", fmt.Sprintf("%.2f× (%.1f s ÷ %.1f s)", l.ratio(), l.wall.Seconds(), l.ideal.Seconds()),
			fmt.Sprintf("≤ %.2f×", barLimitRatio), l.ratio() <= barLimitRatio},
	}
}

// limitTitle heads the scenario's section of BENCHMARKS.md.
const limitTitle = "## Provider limits: RPM and TPM halved mid-batch"

func (l limitFigures) markdown() string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("")
	w(limitTitle)
	w("")
	w("Run %s, commit %s; alone: `%s`.", l.at.UTC().Format("2006-01-02 15:04 UTC"), commit(), limitCommand)
	w("")
	w("One batch of %d chat-completion rows (max_tokens 16: %d tokens a row at the mock) on model `limited`: `max_concurrency: 32`, "+
		"`rpm: %d`, `tpm: %d`, one key, chunks and tick at the shipped defaults. The mock enforces those limits on the key in a %.0f s "+
		"sliding window, answering after %d ms; once %d rows were answered it halves both (`rpm` %d, `tpm` %d), which the service "+
		"is not told: it finds out from its rate-limit headers (a minute's limit, as OpenAI's) and its 429s. The paced ideal is rows ÷ limit: the %d rows answered "+
		"before the switch at %.0f a second, the rest at %.0f, after the %.1f s the window takes to let out enough of the requests it admitted "+
		"at the old limit for any to fit the new one (drain: nothing can be sent then). Wall time runs from the create to the get (every %d ms) that sees the "+
		"batch terminal.", l.rows, limitRowCost, limitRPM1, limitTPM1, limitWindow.Seconds(), benchLatency.Milliseconds(), limitSwitchAt,
		limitRPM2, limitTPM2, l.switchedAt, perRate(limitRPM1, limitTPM1), perRate(limitRPM2, limitTPM2),
		drain(l.switchedAt, perRate(limitRPM1, limitTPM1), perRate(limitRPM2, limitTPM2)), benchPoll.Milliseconds())
	w("")
	tableOf(w, l.figures())
	w("")
	w("%d of the 429s came after the switch; %d upstream requests in all for %d rows.", l.limitedAfter, l.requests, l.rows)
	return b.String()
}

// TestRateLimitBenchmark runs the provider-limits scenario alone and puts
// its section into BENCHMARKS.md in place of the one there (writeSection),
// then fails on a missed bar.
func TestRateLimitBenchmark(t *testing.T) {
	l := runLimitBench(t)
	writeSection(t, strings.TrimPrefix(limitTitle, "## "), section{md: strings.TrimPrefix(l.markdown(), "\n"), figures: l.figures()})
}

// logTimeline logs (go test -v) the requests the mock answered each second
// from start, 200s and 429s: where the 429s came.
func logTimeline(t *testing.T, reqs []mockup.Request, start time.Time) {
	t.Helper()
	var ok, limited []int
	for _, r := range reqs {
		s := int(r.End.Sub(start) / time.Second)
		for len(ok) <= s {
			ok, limited = append(ok, 0), append(limited, 0)
		}
		if r.Status == 429 {
			limited[s]++
		} else {
			ok[s]++
		}
	}
	var b strings.Builder
	for s := range ok {
		fmt.Fprintf(&b, " %d:%d/%d", s, ok[s], limited[s])
	}
	t.Logf("answers each second from the create (other/429):%s", b.String())
}
