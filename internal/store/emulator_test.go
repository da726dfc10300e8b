package store

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/resources"
)

// The store's conditions and transactions are tested against the
// emulator (internal/local/emulator): started once, on the first test
// that asks for a table, and stopped after the package's tests.
var emu struct {
	once sync.Once
	db   *dynamodb.Client
	stop func()
	err  error
	n    atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if emu.stop != nil {
		emu.stop()
	}
	os.Exit(code)
}

// emulatorStore is a Store on a table of its own, created on the emulator
// from the deployment's definition (internal/resources).
func emulatorStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	emu.once.Do(func() {
		ep, stop, err := emulator.Start(ctx)
		if err != nil {
			emu.err = err
			return
		}
		emu.stop = stop
		cfg, err := emulator.Config(ctx, ep)
		if err != nil {
			emu.err = err
			return
		}
		emu.db = dynamodb.NewFromConfig(cfg)
	})
	if emu.err != nil {
		t.Fatalf("emulator: %v", emu.err)
	}
	def := resources.Define(fmt.Sprintf("st%d-%d", time.Now().UnixNano(), emu.n.Add(1))).Table
	if err := emulator.CreateTable(ctx, emu.db, def); err != nil {
		t.Fatal(err)
	}
	return New(emu.db, def.Name)
}
