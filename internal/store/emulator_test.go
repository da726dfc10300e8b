package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/relaybatch/relay/internal/local/emulator"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/resources"
)

// The store's conditions and transactions are tested against the
// emulator (internal/local/emulator/emutest): started on the first test
// that asks for a table, and stopped after the package's tests.
func TestMain(m *testing.M) { emutest.Main(m) }

var tables atomic.Int64

// emulatorStore is a Store on a table of its own, created on the emulator
// from the deployment's definition (internal/resources).
func emulatorStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	db := dynamodb.NewFromConfig(emutest.Config(t))
	def := resources.Define(fmt.Sprintf("st%d-%d", time.Now().UnixNano(), tables.Add(1))).Table
	if err := emulator.CreateTable(ctx, db, def); err != nil {
		t.Fatal(err)
	}
	return New(db, def.Name)
}
