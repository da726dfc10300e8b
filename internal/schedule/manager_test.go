package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"

	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s, err := Parse("0 9 * * 1-5", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	arn, err := m.Create(t.Context(), "tenant_1", "batch_tpl1", s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	got := getSchedule(t, m, "batch_tpl1")
	if aws.ToString(got.Arn) != arn || arn == "" {
		t.Errorf("Create returned ARN %q, schedule has %q", arn, aws.ToString(got.Arn))
	}
	for _, c := range []struct{ field, got, want string }{
		{"ScheduleExpression", aws.ToString(got.ScheduleExpression), "cron(0 9 ? * MON-FRI *)"},
		{"ScheduleExpressionTimezone", aws.ToString(got.ScheduleExpressionTimezone), "Europe/Paris"},
		{"FlexibleTimeWindow.Mode", string(got.FlexibleTimeWindow.Mode), "OFF"},
		{"ActionAfterCompletion", string(got.ActionAfterCompletion), "NONE"},
		{"State", string(got.State), "ENABLED"},
		{"GroupName", aws.ToString(got.GroupName), m.Group},
		{"Target.Arn", aws.ToString(got.Target.Arn), m.TargetARN},
		{"Target.RoleArn", aws.ToString(got.Target.RoleArn), m.RoleARN},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
	if rp := got.Target.RetryPolicy; rp == nil || aws.ToInt32(rp.MaximumEventAgeInSeconds) != 3600 || aws.ToInt32(rp.MaximumRetryAttempts) != 10 {
		t.Errorf("Target.RetryPolicy = %+v, want 10 attempts within an hour", rp)
	}
	// Scheduler substitutes the placeholder only if it arrives verbatim,
	// not as JSON's \u003c escapes.
	raw := aws.ToString(got.Target.Input)
	if !strings.Contains(raw, ScheduledTimePlaceholder) {
		t.Errorf("Target.Input = %s, want the literal %s", raw, ScheduledTimePlaceholder)
	}
	var in Input
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatalf("Target.Input %q: %v", raw, err)
	}
	if want := (Input{TemplateID: "batch_tpl1", Tenant: "tenant_1", ScheduledTime: ScheduledTimePlaceholder}); in != want {
		t.Errorf("Target.Input = %+v, want %+v", in, want)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s, err := Parse("*/15 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.Create(t.Context(), "tenant_1", "batch_tpl2", s)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.Create(t.Context(), "tenant_1", "batch_tpl2", s)
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if again != first {
		t.Errorf("second Create returned %q, want the first ARN %q", again, first)
	}
	out, err := m.API.ListSchedules(t.Context(), &scheduler.ListSchedulesInput{GroupName: aws.String(m.Group)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Schedules) != 1 {
		t.Errorf("group has %d schedules, want 1", len(out.Schedules))
	}
}

func TestCreateRefusesInvalidSpec(t *testing.T) {
	t.Parallel()
	m := &Manager{API: scheduler.NewFromConfig(emutest.Config(t)), Group: "never-used"}
	if _, err := m.Create(t.Context(), "tenant_1", "batch_x", Spec{Cron: "0 0 1 * 1", Timezone: "UTC"}); err == nil {
		t.Fatal("Create with both day fields restricted succeeded, want an error")
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	s, err := Parse("0 0 * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(t.Context(), "tenant_1", "batch_tpl3", s); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(t.Context(), "batch_tpl3"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = m.API.GetSchedule(t.Context(), &scheduler.GetScheduleInput{Name: aws.String("batch_tpl3"), GroupName: aws.String(m.Group)})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Errorf("GetSchedule after Delete: %v, want ResourceNotFoundException", err)
	}
	if err := m.Delete(t.Context(), "batch_tpl3"); err != nil {
		t.Errorf("Delete of a deleted schedule: %v, want nil", err)
	}
}

func TestScheduleName(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100)
	for _, tt := range []struct{ a, b string }{
		{"a/b", "a:b"},
		{long, long + "y"},
		{"", "-"},
	} {
		na, nb := ScheduleName(tt.a), ScheduleName(tt.b)
		for _, n := range []string{na, nb} {
			if len(n) == 0 || len(n) > 64 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
				t.Errorf("ScheduleName gave %q, not a valid Scheduler name", n)
			}
		}
		if na == nb {
			t.Errorf("ScheduleName(%q) = ScheduleName(%q) = %q, want distinct", tt.a, tt.b, na)
		}
	}
	if got := ScheduleName("batch_0190a1b2c3d4e5f60718293a4b"); got != "batch_0190a1b2c3d4e5f60718293a4b" {
		t.Errorf("ScheduleName changed a valid id to %q", got)
	}
}

func getSchedule(t *testing.T, m *Manager, id string) *scheduler.GetScheduleOutput {
	t.Helper()
	got, err := m.API.GetSchedule(t.Context(), &scheduler.GetScheduleInput{Name: aws.String(ScheduleName(id)), GroupName: aws.String(m.Group)})
	if err != nil {
		t.Fatalf("GetSchedule %s: %v", id, err)
	}
	return got
}
