package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"

	"github.com/relaybatch/relay/internal/local/emulator"
)

// client talks to the emulator TestMain starts; integration tests create a
// schedule group of their own with newGroup.
var client *scheduler.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoint, stop, err := emulator.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	cfg, err := emulator.Config(ctx, endpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client = scheduler.NewFromConfig(cfg)
	return m.Run()
}

// newGroup creates a schedule group unique to the test: the emulator answers
// 500 for a schedule in a group that does not exist.
func newGroup(t *testing.T) string {
	t.Helper()
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
	return name
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	return &Manager{
		API:       client,
		Group:     newGroup(t),
		TargetARN: "arn:aws:lambda:us-east-1:000000000000:function:relay-scheduler",
		RoleARN:   "arn:aws:iam::000000000000:role/relay-scheduler",
	}
}
