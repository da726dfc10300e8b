package schedule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	"github.com/aws/aws-sdk-go-v2/service/scheduler/types"
)

// API is the part of the Scheduler client this package uses.
type API interface {
	CreateSchedule(ctx context.Context, in *scheduler.CreateScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.CreateScheduleOutput, error)
	DeleteSchedule(ctx context.Context, in *scheduler.DeleteScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.DeleteScheduleOutput, error)
	GetSchedule(ctx context.Context, in *scheduler.GetScheduleInput, optFns ...func(*scheduler.Options)) (*scheduler.GetScheduleOutput, error)
	ListSchedules(ctx context.Context, in *scheduler.ListSchedulesInput, optFns ...func(*scheduler.Options)) (*scheduler.ListSchedulesOutput, error)
}

var _ API = (*scheduler.Client)(nil)

// ScheduledTimePlaceholder is Scheduler's context attribute for the firing's
// scheduled time: Scheduler replaces it in the target input with e.g.
// "2022-03-22T18:59:43Z" on every invocation, and the local Firer does the
// same, so the scheduler function reads the time from its payload either way.
const ScheduledTimePlaceholder = "<aws.scheduler.scheduled-time>"

// Input is the JSON a template's schedule passes to the scheduler function.
type Input struct {
	TemplateID string `json:"template_id"`
	Tenant     string `json:"tenant"`
	// ScheduledTime is the firing's scheduled time, RFC 3339 in UTC, once
	// Scheduler (or the Firer) has substituted ScheduledTimePlaceholder.
	// One run per scheduled time makes a redelivered firing harmless.
	ScheduledTime string `json:"scheduled_time"`
}

// At returns ScheduledTime as a time; it fails if the placeholder was not
// substituted, which means the payload did not come from a firing.
func (in Input) At() (time.Time, error) {
	t, err := time.Parse(time.RFC3339, in.ScheduledTime)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule input for template %s: scheduled_time %q: %w", in.TemplateID, in.ScheduledTime, err)
	}
	return t, nil
}

// retryPolicy: the scheduler function is idempotent per scheduled time, so
// retrying a failed invocation is safe; after an hour the run is stale and
// the next firing is the better run, so Scheduler gives up (the default is
// 185 attempts over 24 hours).
var retryPolicy = &types.RetryPolicy{
	MaximumRetryAttempts:     aws.Int32(10),
	MaximumEventAgeInSeconds: aws.Int32(int32(MaxLateness / time.Second)),
}

// MaxLateness is how late a firing may still be delivered, by Scheduler's
// retries in AWS and by the local firer (internal/local/firer) catching up.
const MaxLateness = time.Hour

// Manager creates and deletes the service's schedules in one schedule group.
type Manager struct {
	API   API
	Group string
	// TargetARN is the scheduler function's ARN; RoleARN the role Scheduler
	// assumes to invoke it.
	TargetARN string
	RoleARN   string
}

// Create makes the schedule that fires template templateID of tenant on s,
// and returns its ARN. The schedule is named after the template
// (ScheduleName), so creating it again returns the existing one's ARN
// rather than a second schedule.
func (m *Manager) Create(ctx context.Context, tenant, templateID string, s Spec) (string, error) {
	c, err := s.compile()
	if err != nil {
		return "", err
	}
	input, err := marshalInput(Input{TemplateID: templateID, Tenant: tenant, ScheduledTime: ScheduledTimePlaceholder})
	if err != nil {
		return "", fmt.Errorf("create schedule for template %s: %w", templateID, err)
	}
	name := ScheduleName(templateID)
	out, err := m.API.CreateSchedule(ctx, &scheduler.CreateScheduleInput{
		Name:                       aws.String(name),
		GroupName:                  GroupName(m.Group),
		Description:                aws.String("relay template " + templateID),
		ScheduleExpression:         aws.String(c.expression()),
		ScheduleExpressionTimezone: aws.String(s.Timezone),
		// A template runs at its time, not somewhere in a window after it.
		FlexibleTimeWindow:    &types.FlexibleTimeWindow{Mode: types.FlexibleTimeWindowModeOff},
		Target:                m.target(input),
		ActionAfterCompletion: types.ActionAfterCompletionNone,
		State:                 types.ScheduleStateEnabled,
	})
	var conflict *types.ConflictException
	if errors.As(err, &conflict) {
		got, err := m.API.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(name), GroupName: GroupName(m.Group)})
		if err != nil {
			return "", fmt.Errorf("get existing schedule %s: %w", name, err)
		}
		return aws.ToString(got.Arn), nil
	}
	if err != nil {
		return "", fmt.Errorf("create schedule %s (%s): %w", name, c.expression(), err)
	}
	return aws.ToString(out.ScheduleArn), nil
}

// Delete removes the schedule of templateID; one that does not exist is
// already deleted.
func (m *Manager) Delete(ctx context.Context, templateID string) error {
	name := ScheduleName(templateID)
	_, err := m.API.DeleteSchedule(ctx, &scheduler.DeleteScheduleInput{Name: aws.String(name), GroupName: GroupName(m.Group)})
	if err != nil && !IsNotFound(err) {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return nil
}

func (m *Manager) target(input []byte) *types.Target {
	return &types.Target{
		Arn:         aws.String(m.TargetARN),
		RoleArn:     aws.String(m.RoleARN),
		Input:       aws.String(string(input)),
		RetryPolicy: retryPolicy,
	}
}

// marshalInput writes in without HTML escaping: encoding/json would turn the
// placeholder's angle brackets into \u003c…\u003e, which Scheduler does not
// recognise.
func marshalInput(in Input) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(in); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// maxNameLen is Scheduler's limit on schedule names.
const maxNameLen = 64

// ScheduleName is the schedule name for an id. Scheduler names are at most
// 64 characters of [0-9a-zA-Z-_.]; an id that fits is used as is, any other
// is cleaned and cut, with a hash of the whole id appended so different ids
// never share a schedule.
func ScheduleName(id string) string {
	clean := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, id)
	if clean == id && id != "" && len(id) <= maxNameLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	suffix := "-" + hex.EncodeToString(sum[:8])
	if len(clean) > maxNameLen-len(suffix) {
		clean = clean[:maxNameLen-len(suffix)]
	}
	return clean + suffix
}

// GroupName is a group name as Scheduler's API takes it: nil for "", the
// default group. The local firer uses it too.
func GroupName(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// IsNotFound reports whether err is Scheduler's ResourceNotFoundException.
func IsNotFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}
