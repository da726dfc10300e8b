package localstack

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/relaybatch/relay/internal/local/localrun"
	"github.com/relaybatch/relay/internal/resources"
)

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func replaceMock(s, addr string) string { return strings.ReplaceAll(s, "MOCK", addr) }

func netListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// queueTimes sets the visibility timeout of queue key (a dead-letter
// queue's: "work-dlq") and the timeout of the function it feeds, after
// what o's Tune already does.
func queueTimes(o *localrun.Options, key string, visibility, timeout time.Duration) {
	prev := o.Tune
	o.Tune = func(s *resources.Set) {
		if prev != nil {
			prev(s)
		}
		name := s.Prefix + "-" + key
		for i := range s.Queues {
			switch name {
			case s.Queues[i].Name:
				s.Queues[i].VisibilityTimeout = visibility
			case s.Queues[i].DLQName:
				s.Queues[i].DLQVisibility = visibility
			}
		}
		for i := range s.Functions {
			if s.Functions[i].Queue == name {
				s.Functions[i].Timeout = timeout
			}
		}
	}
}

// withAPIOption adds an AWS SDK middleware (a fault injector, a counter)
// to every client of the runtime.
func withAPIOption(opt func(*middleware.Stack) error) func(*localrun.Options) {
	return func(o *localrun.Options) {
		cfg := o.AWS.Copy()
		cfg.APIOptions = append(cfg.APIOptions, opt)
		o.AWS = cfg
	}
}
