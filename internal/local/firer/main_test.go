package firer

import (
	"testing"

	"github.com/relaybatch/relay/internal/local/emulator/emutest"
	"github.com/relaybatch/relay/internal/schedule"
)

// The Firer's tests run against the emulator, each in a schedule group of
// its own.
func TestMain(m *testing.M) { emutest.Main(m) }

func newManager(t *testing.T) *schedule.Manager {
	t.Helper()
	client, group := emutest.ScheduleGroup(t)
	return &schedule.Manager{
		API:       client,
		Group:     group,
		TargetARN: "arn:aws:lambda:us-east-1:000000000000:function:relay-scheduler",
		RoleARN:   "arn:aws:iam::000000000000:role/relay-scheduler",
	}
}
