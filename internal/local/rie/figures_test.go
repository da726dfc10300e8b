package rie

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/app/inittest"
)

// BenchmarkFigures measures what BENCHMARKS.md "Functions under the Lambda
// RIE" reports: each function's bootstrap size, its cold start (the
// emulator's process started until it listens, then the first invocation:
// the bootstrap's exec and init and the invocation) and its warm
// invocation's round trip, with an event its handler answers without a call
// to AWS. A benchmark, not a test: it measures once (it builds the seven
// bootstraps) and checks nothing; make bench runs it, or by hand:
//
//	go test -run '^$' -bench BenchmarkFigures -benchtime 1x -v ./internal/local/rie
func BenchmarkFigures(t *testing.B) {
	ctx := context.Background()
	root := filepath.Join("..", "..", "..")
	build := filepath.Join(root, "build")
	rie, err := EnsureEmulator(ctx, filepath.Join(build, "rie"))
	if err != nil {
		t.Fatal(err)
	}
	events := map[string]string{
		"api":       `{"httpMethod":"GET","path":"/v1/models","resource":"/{proxy+}","headers":{}}`,
		"scheduler": `{}`,
	}
	names := []string{"api", "deadletter", "dispatcher", "executor", "finalizer", "scheduler", "webhook"}
	bin := filepath.Join(build, "lambda-"+runtime.GOARCH)
	if err := Build(ctx, root, bin, names); err != nil {
		t.Fatal(err)
	}
	const colds, warms = 5, 50
	t.Logf("%-10s %6s %12s %14s %12s", "function", "MB", "start (med)", "init+invoke", "warm (med)")
	for _, name := range names {
		st, err := os.Stat(filepath.Join(bin, name, "bootstrap"))
		if err != nil {
			t.Fatal(err)
		}
		task := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(task, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(bin, name, "bootstrap"))
		if err := os.WriteFile(filepath.Join(task, "bootstrap"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		event := events[name]
		if event == "" {
			event = `{"Records":[]}`
		}
		newFunction := func() *Function {
			return &Function{Name: "relay-" + name, Env: inittest.Env(t), Timeout: 30 * time.Second, Memory: 1024,
				TaskDir: task, RIE: rie, Region: "us-east-1"}
		}
		var start, cold, warm []time.Duration
		for range colds {
			f := newFunction()
			if _, err := f.Invoke(ctx, "", []byte(event)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			s := f.Stats()
			start, cold = append(start, s.StartTotal), append(cold, s.ColdTotal-s.StartTotal)
			if len(cold) == colds {
				for range warms {
					began := time.Now()
					if _, err := f.Invoke(ctx, "", []byte(event)); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					warm = append(warm, time.Since(began))
				}
			}
			f.Close()
		}
		t.Logf("%-10s %6.1f %12v %14v %12v", name, float64(st.Size())/(1<<20), median(start).Round(100*time.Microsecond),
			median(cold).Round(100*time.Microsecond), median(warm).Round(10*time.Microsecond))
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
