// Package emutest gives a package's tests the emulator of
// internal/local/emulator: one per test binary, started by the first test
// that asks for it (Endpoint, Config) and stopped by Main after the last.
// Under -short no test starts it and each test that needs it is skipped,
// so `go test -short ./...` (make unit) runs with no emulator and no
// AWS_ENDPOINT_URL (README "Tests").
package emutest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"

	"github.com/relaybatch/relay/internal/local/emulator"
)

var shared struct {
	inMain   bool
	once     sync.Once
	endpoint string
	cfg      aws.Config
	stop     func()
	err      error
}

// Main is the TestMain of a package whose tests use the emulator:
//
//	func TestMain(m *testing.M) { emutest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs m's tests and then stops the emulator if one of them started
// it, for a TestMain that has more to do than Main.
func Run(m *testing.M) int {
	shared.inMain = true
	defer func() {
		if shared.stop != nil {
			shared.stop()
		}
	}()
	return m.Run()
}

// Require skips t under -short: t needs the emulator (or starts one of
// its own), which make unit does not run.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the AWS emulator (internal/local/emulator): -short runs without one; make test runs this")
	}
}

// Endpoint is the URL of the binary's emulator: AWS_ENDPOINT_URL when set,
// else a moto_server started on the first call. Under -short t is skipped.
func Endpoint(t testing.TB) string {
	t.Helper()
	Require(t)
	if !shared.inMain {
		t.Fatal("emutest: the package's TestMain must call emutest.Main (or Run), which stops the emulator")
	}
	shared.once.Do(start)
	if shared.err != nil {
		t.Fatalf("emulator: %v", shared.err)
	}
	return shared.endpoint
}

// Config is the SDK configuration for Endpoint, a copy t may change.
func Config(t testing.TB) aws.Config {
	t.Helper()
	Endpoint(t)
	return shared.cfg.Copy()
}

func start() {
	ctx := context.Background()
	ep, stop, err := emulator.Start(ctx)
	if err != nil {
		shared.err = err
		return
	}
	shared.endpoint, shared.stop = ep, stop
	shared.cfg, shared.err = emulator.Config(ctx, ep)
}

// ScheduleGroup creates a schedule group unique to t, deleted after it,
// and returns it with a Scheduler client: the emulator answers 500 for a
// schedule in a group that does not exist.
func ScheduleGroup(t testing.TB) (*scheduler.Client, string) {
	t.Helper()
	client := scheduler.NewFromConfig(Config(t))
	var b [4]byte
	rand.Read(b[:])
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	name = fmt.Sprintf("%.50s-%s", name, hex.EncodeToString(b[:]))
	if _, err := client.CreateScheduleGroup(t.Context(), &scheduler.CreateScheduleGroupInput{Name: aws.String(name)}); err != nil {
		t.Fatalf("create schedule group %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteScheduleGroup(context.Background(), &scheduler.DeleteScheduleGroupInput{Name: aws.String(name)})
	})
	return client, name
}
