//go:build loadtest || chaos || bench

package localstack

import (
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// envInt reads a size of a run from the environment: at least least.
func envInt(t *testing.T, name string, def, least int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s: %q is not a count of at least %d", name, v, least)
	}
	return n
}

// countAWS returns cfg with an HTTP client that counts its AWS requests.
func countAWS(cfg aws.Config) (aws.Config, *awsByFunction) {
	tr := awshttp.NewBuildableClient().GetTransport()
	// The emulator is one host: with the SDK's 10 idle connections to it,
	// tens of thousands of requests would dial again and again and could
	// run the machine out of ports (TIME_WAIT).
	tr.MaxIdleConnsPerHost = 128
	counter := &awsByFunction{next: tr, n: map[string]map[string]int64{}, seen: map[string]bool{}}
	cfg = cfg.Copy()
	cfg.HTTPClient = &http.Client{Transport: counter}
	return cfg, counter
}

// awsByFunction counts the runtime's AWS requests at its HTTP client, by
// the function that made them: invocations and the event-source pollers'
// own calls carry a Lambda context whose InvokedFunctionArn ends in
// "function:<name>". The api function's requests carry none (gateway.Front
// makes no Lambda context), nor do the local tick sender and schedule
// firer, which stand in for EventBridge, nor this test's own reads: they
// are counted under unattributed and left out of the figures. Nor are the
// requests of invocations that began before the last markBefore (the
// bench's held row's executor invocation, which keeps its lease and
// re-reads its batch for as long as its row hangs): they are counted under
// earlier.
type awsByFunction struct {
	next   http.RoundTripper
	mu     sync.Mutex
	n      map[string]map[string]int64 // function → "Service.Operation" → requests
	seen   map[string]bool             // the invocations (request ids) that made a request
	before map[string]bool             // seen at the last markBefore
}

const (
	unattributed = "(unattributed)"
	earlier      = "(invocations begun before the run)"
)

// markBefore sets the invocations that have made requests so far apart:
// what they request from now on is counted under earlier.
func (c *awsByFunction) markBefore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = maps.Clone(c.seen)
}

func (c *awsByFunction) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	fn := unattributed
	lc, ok := lambdacontext.FromContext(ctx)
	if ok {
		fn = functionName(lc.InvokedFunctionArn)
	}
	c.mu.Lock()
	if ok && lc.AwsRequestID != "" { // a poller's own calls carry none
		c.seen[lc.AwsRequestID] = true
		if c.before[lc.AwsRequestID] {
			fn = earlier
		}
	}
	c.mu.Unlock()
	op := awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx)
	c.mu.Lock()
	if c.n[fn] == nil {
		c.n[fn] = map[string]int64{}
	}
	c.n[fn][op]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// functionName is <name> in arn:…:function:<name>[:qualifier].
func functionName(arn string) string {
	i := strings.LastIndex(arn, ":function:")
	if i < 0 {
		return unattributed
	}
	name, _, _ := strings.Cut(arn[i+len(":function:"):], ":")
	return name
}

// fnCounts is requests by function, then by operation.
type fnCounts map[string]map[string]int64

func (c *awsByFunction) snapshot() fnCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fnCounts{}
	for fn, ops := range c.n {
		s[fn] = maps.Clone(ops)
	}
	return s
}

// since is what was counted after s0.
func (s fnCounts) since(s0 fnCounts) fnCounts {
	d := fnCounts{}
	for fn, ops := range s {
		for op, n := range ops {
			if n -= s0[fn][op]; n > 0 {
				if d[fn] == nil {
					d[fn] = map[string]int64{}
				}
				d[fn][op] = n
			}
		}
	}
	return d
}

func (s fnCounts) of(fn string) (n int64) {
	for _, v := range s[fn] {
		n += v
	}
	return n
}

// attributed is every function's requests: the figure the bars are about.
func (s fnCounts) attributed() (n int64) {
	for fn := range s {
		if fn != unattributed && fn != earlier {
			n += s.of(fn)
		}
	}
	return n
}

// total is every request counted, attributed or not.
func (s fnCounts) total() (n int64) {
	for fn := range s {
		n += s.of(fn)
	}
	return n
}

// byOp is requests by "Service.Operation", over all functions.
func (s fnCounts) byOp() map[string]int64 {
	ops := map[string]int64{}
	for _, byOp := range s {
		for op, n := range byOp {
			ops[op] += n
		}
	}
	return ops
}
