package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
	schtypes "github.com/aws/aws-sdk-go-v2/service/scheduler/types"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// fakeClock is the schedule firer's clock, moved by a test so a cron
// template's minutes pass at once.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// apiBatch is the Batch object with the extension fields the SDK lacks.
type apiBatch struct {
	ID               string            `json:"id"`
	Status           string            `json:"status"`
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	ExpiresAt        *int64            `json:"expires_at"`
	Metadata         map[string]string `json:"metadata"`
	Priority         int               `json:"priority"`
	TemplateID       *string           `json:"template_id"`
	WebhookURL       *string           `json:"webhook_url"`
	Schedule         *string           `json:"schedule"`
	ScheduleTimezone *string           `json:"schedule_timezone"`
	RequestCounts    struct {
		Total, Completed, Failed int64
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
	} `json:"errors"`
	WebhookDeliveries *struct {
		Status         string  `json:"status"`
		Attempts       int     `json:"attempts"`
		LastStatusCode *int    `json:"last_status_code"`
		LastError      *string `json:"last_error"`
	} `json:"webhook_deliveries"`
}

// postBatch creates a batch from a raw JSON body (the SDKs cannot send a
// schedule), with extra headers as name, value pairs.
func postBatch(t *testing.T, rt *localrun.Runtime, key string, body map[string]any, header ...string) (int, []byte) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", rt.URL+"/v1/batches", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func decodeBatch(t *testing.T, data []byte) apiBatch {
	t.Helper()
	var b apiBatch
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("decode batch %s: %v", data, err)
	}
	return b
}

func getBatch(t *testing.T, rt *localrun.Runtime, key, id string) apiBatch {
	t.Helper()
	return decodeBatch(t, rawGet(t, rt, key, "/v1/batches/"+id))
}

// runsOf lists a template's runs through GET /v1/batches?template_id=.
func runsOf(t *testing.T, rt *localrun.Runtime, key, templateID string) []apiBatch {
	t.Helper()
	var page struct {
		Data []apiBatch `json:"data"`
	}
	if err := json.Unmarshal(rawGet(t, rt, key, "/v1/batches?template_id="+templateID), &page); err != nil {
		t.Fatal(err)
	}
	return page.Data
}

// inlineTemplate creates a template of one inline row on schedule.
func inlineTemplate(t *testing.T, rt *localrun.Runtime, key, schedule string) apiBatch {
	t.Helper()
	status, body := postBatch(t, rt, key, map[string]any{
		"endpoint": "/v1/chat/completions", "schedule": schedule,
		"requests": []map[string]any{{"method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}}},
	})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	return decodeBatch(t, body)
}

// eventually polls cond until it holds; the deadline only keeps a broken
// service from hanging the test.
func eventually(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A `* * * * *` template fires a run as its minute passes (the firer's
// clock is moved instead of waiting a minute), and stops firing once
// cancelled: its schedule is gone.
func TestTemplateFiresRunsUntilCancelled(t *testing.T) {
	t.Parallel()
	// Frozen an hour ahead of the real clock and on a minute, so the
	// schedule's creation (real time) precedes it and the next firing is
	// exactly one minute on.
	clock := &fakeClock{t: time.Now().Add(time.Hour).Truncate(time.Minute)}
	rt := runtime(t, func(o *localrun.Options) {
		o.SchedulerClock, o.SchedulerRefresh = clock.Now, 100*time.Millisecond
	})
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	rows := nRows(12, "nightly")
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	rcv := newHookReceiver(t, nil)

	status, body := postBatch(t, rt, key, map[string]any{
		"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "completion_window": "2h",
		"schedule": "* * * * *", "metadata": map[string]string{"job": "nightly"}, "priority": 3, "webhook_url": rcv.URL,
	})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	if tpl.Status != "scheduled" || tpl.Schedule == nil || *tpl.Schedule != "* * * * *" || tpl.ScheduleTimezone == nil || *tpl.ScheduleTimezone != "UTC" || tpl.TemplateID != nil {
		t.Fatalf("template: got %s", body)
	}

	// Its schedule: Scheduler's 6-field cron, no flexible window, the
	// template and Scheduler's scheduled-time attribute as input.
	group := rt.App.Resources.ScheduleGroup
	sch, err := rt.App.Scheduler.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(tpl.ID), GroupName: &group})
	if err != nil {
		t.Fatalf("get schedule: %v", err)
	}
	input := aws.ToString(sch.Target.Input)
	if got := aws.ToString(sch.ScheduleExpression); got != "cron(* * * * ? *)" || sch.FlexibleTimeWindow.Mode != schtypes.FlexibleTimeWindowModeOff ||
		!strings.Contains(input, tpl.ID) || !strings.Contains(input, "<aws.scheduler.scheduled-time>") {
		t.Fatalf("schedule: expression %s, window %s, input %s", got, sch.FlexibleTimeWindow.Mode, input)
	}
	// No runs of its own: a tick later it is still scheduled, with nothing planned.
	time.Sleep(1500 * time.Millisecond)
	if got := getBatch(t, rt, key, tpl.ID); got.Status != "scheduled" || got.RequestCounts.Total != 0 || len(runsOf(t, rt, key, tpl.ID)) != 0 {
		t.Fatalf("template before its minute: %+v", got)
	}

	clock.Add(time.Minute + time.Second)
	var runs []apiBatch
	eventually(t, "a run after the template's minute", 30*time.Second, func() bool {
		runs = runsOf(t, rt, key, tpl.ID)
		return len(runs) > 0
	})
	if len(runs) != 1 {
		t.Fatalf("one minute passed, got %d runs", len(runs))
	}
	run := runs[0]
	if run.TemplateID == nil || *run.TemplateID != tpl.ID || run.InputFileID != f.ID || run.Metadata["job"] != "nightly" ||
		run.Priority != 3 || run.CompletionWindow != "2h" || run.Schedule != nil || run.ExpiresAt == nil ||
		run.WebhookURL == nil || *run.WebhookURL != rcv.URL {
		t.Fatalf("run: got %+v", run)
	}
	done := waitBatch(t, c, run.ID)
	if done.Status != "completed" {
		t.Fatalf("run ended %s", done.Status)
	}
	checkInvariant(t, c, done, idsOf(rows))

	// Cancel: the schedule is deleted, the template cancelled, and
	// minutes passing fire nothing more.
	status, body = rawDo(t, rt, key, "POST", "/v1/batches/"+tpl.ID+"/cancel", nil)
	if status != 200 || decodeBatch(t, body).Status != "cancelled" {
		t.Fatalf("cancel template: %d %s", status, body)
	}
	_, err = rt.App.Scheduler.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(tpl.ID), GroupName: &group})
	var nf *schtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("schedule after cancel: got %v, want ResourceNotFoundException", err)
	}
	clock.Add(10 * time.Minute)
	time.Sleep(2 * time.Second) // twenty refreshes of the firer
	if got := runsOf(t, rt, key, tpl.ID); len(got) != 1 {
		t.Fatalf("after cancel and ten minutes: %d runs, want still 1", len(got))
	}
	// Webhooks: the run's completion, then the template's cancellation
	// (and the run's lifecycle events before its completion).
	rcv.waitType(t, "batch.completed")
	rcv.waitType(t, "batch.cancelled")
	events := map[string]string{}
	for _, r := range rcv.got() {
		var ev struct {
			Type string   `json:"type"`
			Data apiBatch `json:"data"`
		}
		json.Unmarshal(r.body, &ev)
		events[ev.Type] = ev.Data.ID
	}
	if events["batch.completed"] != run.ID || events["batch.cancelled"] != tpl.ID {
		t.Fatalf("webhook events: got %v, want the run completed and the template cancelled", events)
	}
	// A cancelled template is terminal, like a cancelled batch.
	if status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+tpl.ID+"/cancel", nil); status != 409 {
		t.Fatalf("cancel again: %d %s, want 409", status, body)
	}
}

// firing is the scheduler function's input for template id at a time, as
// Scheduler sends it once it has substituted the scheduled time.
func firing(tenant, id string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"template_id":%q,"tenant":%q,"scheduled_time":%q}`, id, tenant, at.UTC().Format(time.RFC3339))
}

// A firing delivered twice (Scheduler retries, or the same time fired by
// two processes) makes one run; the next scheduled time makes another.
func TestTemplateDuplicateFiringMakesOneRun(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	_, key := client(t, rt, "acme")
	status, body := postBatch(t, rt, key, map[string]any{
		"endpoint": "/v1/chat/completions", "schedule": "0 6 * * MON-FRI", "schedule_timezone": "Europe/Berlin",
		"requests": []map[string]any{{"method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}}},
	})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	at := time.Date(2030, 1, 7, 5, 0, 0, 0, time.UTC)

	var wg sync.WaitGroup
	ids := make([]string, 3)
	for i := range 2 {
		wg.Go(func() {
			b, err := rt.App.Batches.FireTemplate(ctx, firing("acme", tpl.ID, at))
			if err != nil {
				t.Errorf("fire %d: %v", i, err)
			}
			ids[i] = b.ID
		})
	}
	wg.Wait()
	b, err := rt.App.Batches.FireTemplate(ctx, firing("acme", tpl.ID, at))
	if err != nil {
		t.Fatal(err)
	}
	ids[2] = b.ID
	if ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("three firings of one time made runs %v, want one", ids)
	}
	if runs := runsOf(t, rt, key, tpl.ID); len(runs) != 1 || runs[0].ID != ids[0] {
		t.Fatalf("runs: got %+v", runs)
	}
	next, err := rt.App.Batches.FireTemplate(ctx, firing("acme", tpl.ID, at.Add(24*time.Hour)))
	if err != nil || next.ID == ids[0] {
		t.Fatalf("next day's firing: %v, run %s", err, next.ID)
	}
	if runs := runsOf(t, rt, key, tpl.ID); len(runs) != 2 {
		t.Fatalf("runs after two scheduled times: got %d, want 2", len(runs))
	}
	// Another tenant cannot list them.
	_, other := client(t, rt, "globex")
	if runs := runsOf(t, rt, other, tpl.ID); len(runs) != 0 {
		t.Fatalf("another tenant sees %d runs", len(runs))
	}
	// A cancelled template fires nothing.
	if status, body := rawDo(t, rt, key, "POST", "/v1/batches/"+tpl.ID+"/cancel", nil); status != 200 {
		t.Fatalf("cancel: %d %s", status, body)
	}
	if err := rt.App.Batches.Fire(ctx, firing("acme", tpl.ID, at.Add(48*time.Hour))); err != nil {
		t.Fatalf("firing a cancelled template: %v", err)
	}
	if runs := runsOf(t, rt, key, tpl.ID); len(runs) != 2 {
		t.Fatalf("runs after firing a cancelled template: got %d, want 2", len(runs))
	}
	// A payload that is no firing is dropped, not retried forever.
	if err := rt.App.Batches.Fire(ctx, []byte(`{"template_id":"nope"}`)); err != nil {
		t.Fatalf("bad payload: %v", err)
	}
}

// A template spends as its key would: once the key that created it is
// disabled, its next firing runs nothing, cancels it with the reason in
// its errors and deletes its schedule.
func TestTemplateStopsWhenItsKeyIsDisabled(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	_, key := client(t, rt, "acme")
	_, admin := client(t, rt, "acme") // another key of the tenant, still active
	tpl := inlineTemplate(t, rt, key, "0 6 * * *")
	at := time.Date(2030, 1, 7, 6, 0, 0, 0, time.UTC)
	if run, err := rt.App.Batches.FireTemplate(ctx, firing("acme", tpl.ID, at)); err != nil || run.ID == tpl.ID {
		t.Fatalf("firing with an active key: %v, %s", err, run.ID)
	}
	if err := rt.App.Store.DisableKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := rt.App.Batches.Fire(ctx, firing("acme", tpl.ID, at.Add(24*time.Hour))); err != nil {
		t.Fatalf("firing with a disabled key: %v", err)
	}
	if runs := runsOf(t, rt, admin, tpl.ID); len(runs) != 1 {
		t.Fatalf("runs after the key was disabled: got %d, want still 1", len(runs))
	}
	got := getBatch(t, rt, admin, tpl.ID)
	if got.Status != "cancelled" || got.Errors == nil || len(got.Errors.Data) != 1 || got.Errors.Data[0].Code != "api_key_disabled" ||
		!strings.Contains(got.Errors.Data[0].Message, "disabled") {
		t.Fatalf("template after a firing with its key disabled: %s %+v, want cancelled with api_key_disabled", got.Status, got.Errors)
	}
	group := rt.App.Resources.ScheduleGroup
	_, err := rt.App.Scheduler.GetSchedule(ctx, &scheduler.GetScheduleInput{Name: aws.String(tpl.ID), GroupName: &group})
	var nf *schtypes.ResourceNotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("schedule of the stopped template: got %v, want ResourceNotFoundException", err)
	}
}

// A template holds its input file: deleted, the file is gone for the API,
// and the template's runs still read it until the template ends
// (docs/api.md "Files", deleting an input).
func TestTemplateRunsAfterItsInputIsDeleted(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "x")))
	status, body := postBatch(t, rt, key, map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "schedule": "*/5 * * * *"})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	if _, err := c.Files.Delete(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Files.Get(ctx, f.ID); err == nil {
		t.Fatal("the deleted file is still served")
	}
	run, err := rt.App.Batches.FireTemplate(ctx, firing("acme", tpl.ID, time.Now().Truncate(5*time.Minute)))
	if err != nil {
		t.Fatalf("fire: %v", err)
	}
	done := waitBatch(t, c, run.ID)
	if done.Status != "completed" || done.RequestCounts.Completed != 2 {
		t.Fatalf("run of a template whose input was deleted: %s %+v, want completed", done.Status, done.RequestCounts)
	}
	if got := getBatch(t, rt, key, tpl.ID); got.Status != "scheduled" {
		t.Fatalf("template after its run: %s, want still scheduled", got.Status)
	}
}

// Invalid schedules are refused with a 400 naming the field; a retried
// create (Idempotency-Key) returns the first template and one schedule.
func TestTemplateCreateValidation(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, key := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(1, "x")))
	for _, tt := range []struct {
		name, schedule, tz, param string
	}{
		{"four fields", "* * * *", "", "schedule"},
		{"minute out of range", "61 * * * *", "", "schedule"},
		{"never fires", "0 0 30 2 *", "", "schedule"},
		{"both day fields", "0 0 1 * MON", "", "schedule"},
		{"unknown timezone", "0 * * * *", "Mars/Olympus_Mons", "schedule_timezone"},
		{"timezone alone", "", "UTC", "schedule_timezone"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions"}
			if tt.schedule != "" {
				req["schedule"] = tt.schedule
			}
			if tt.tz != "" {
				req["schedule_timezone"] = tt.tz
			}
			status, body := postBatch(t, rt, key, req)
			var e struct {
				Error struct{ Param, Message string }
			}
			json.Unmarshal(body, &e)
			if status != 400 || e.Error.Param != tt.param || e.Error.Message == "" {
				t.Fatalf("got %d %s, want 400 naming %s", status, body, tt.param)
			}
		})
	}
	if status, body := postBatch(t, rt, key, map[string]any{"endpoint": "/v1/chat/completions", "schedule": "* * * * *"}); status != 400 {
		t.Fatalf("template without input: %d %s", status, body)
	}

	req := map[string]any{"input_file_id": f.ID, "endpoint": "/v1/chat/completions", "schedule": "30 2 * * *", "schedule_timezone": "America/New_York"}
	s1, b1 := postBatch(t, rt, key, req, "Idempotency-Key", "tpl-once")
	s2, b2 := postBatch(t, rt, key, req, "Idempotency-Key", "tpl-once")
	if s1 != 200 || s2 != 200 || decodeBatch(t, b1).ID != decodeBatch(t, b2).ID {
		t.Fatalf("retried create: %d %s / %d %s", s1, b1, s2, b2)
	}
	out, err := rt.App.Scheduler.ListSchedules(context.Background(), &scheduler.ListSchedulesInput{GroupName: aws.String(rt.App.Resources.ScheduleGroup)})
	if err != nil || len(out.Schedules) != 1 {
		t.Fatalf("schedules after a retried create: %v, %v", out, err)
	}
	got, err := rt.App.Scheduler.GetSchedule(context.Background(), &scheduler.GetScheduleInput{Name: out.Schedules[0].Name, GroupName: aws.String(rt.App.Resources.ScheduleGroup)})
	if err != nil || aws.ToString(got.ScheduleExpression) != "cron(30 2 * * ? *)" || aws.ToString(got.ScheduleExpressionTimezone) != "America/New_York" {
		t.Fatalf("schedule: %v %v", got, err)
	}
}

// A batch whose window passes while its chunks wait for capacity ends
// expired with no executor running it: the dispatcher's tick releases the
// waiting chunks without capacity and they write batch_expired lines;
// rows that finished keep their results, and the webhook says so.
//
// The window is shortened by setting expires_at in the store once the
// first chunk is running (the API's shortest window is an hour).
func TestExpiryWhileWaitingForCapacity(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	c, _ := client(t, rt, "acme")
	rcv := newHookReceiver(t, nil)
	// 30 rows, 3 chunks of 10; gpt-4o-mini takes one chunk at a time
	// (max_concurrency 8, a chunk holds 8), and the first one is slow.
	rows := nRows(30, "row")
	for i := range 10 {
		rows[i].content += " [[mock:sleep=3s]]"
	}
	f := upload(t, c, "in.jsonl", jsonlRows(rows))
	b := createBatch(t, c, f.ID, option.WithJSONSet("webhook_url", rcv.URL+"/hook"))

	expireWhileRunning(t, rt, "acme", b.ID, "gpt-4o-mini")

	done := waitBatch(t, c, b.ID)
	if done.Status != "expired" || done.ExpiredAt == 0 || done.CompletedAt != 0 {
		t.Fatalf("batch ended %s (expired_at %d)", done.Status, done.ExpiredAt)
	}
	out, errs := checkInvariant(t, c, done, idsOf(rows))
	for i, r := range rows {
		switch l, ok := out[r.id]; {
		case i < 10 && (!ok || l.Response.StatusCode != 200):
			t.Errorf("row %s of the running chunk: got %+v, want its result kept", r.id, errs[r.id])
		case i >= 10 && (ok || errs[r.id].Error == nil || errs[r.id].Error.Code != "batch_expired"):
			t.Errorf("row %s of a waiting chunk: got %+v, want batch_expired", r.id, errs[r.id])
		}
	}
	if done.RequestCounts.Completed != 10 || done.RequestCounts.Failed != 20 {
		t.Errorf("request_counts %+v, want 10 completed and 20 failed", done.RequestCounts)
	}
	got := rcv.waitType(t, "batch.expired")
	var ev struct {
		Type string   `json:"type"`
		Data apiBatch `json:"data"`
	}
	if err := json.Unmarshal(got[0].body, &ev); err != nil || ev.Type != "batch.expired" || ev.Data.ID != b.ID || ev.Data.Status != "expired" {
		t.Fatalf("webhook: %s (%v)", got[0].body, err)
	}
}

// expireWhileRunning waits until the first chunk of a batch on model is
// running (8 requests in flight at the mock), then moves the batch's window
// into the past, as if it had run out: the rest of its rows must expire.
func expireWhileRunning(t *testing.T, rt *localrun.Runtime, tenant, batchID, model string) {
	t.Helper()
	eventually(t, "the first chunk running", 30*time.Second, func() bool {
		return rt.Mock.Stats().ByModel[model] >= 8
	})
	past := time.Now().Add(-time.Second).Unix()
	if _, err := rt.App.Store.UpdateBatch(context.Background(), tenant, batchID, func(b *batch.Batch) error {
		if b.ChunksDone > 0 {
			return fmt.Errorf("chunk done before the window was shortened: %d", b.ChunksDone)
		}
		b.ExpiresAt = &past
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A template's schedule survives a restart of the local runtime on the
// same emulator (whose CreateScheduleGroup of an existing group empties
// it), and the restarted firer fires its next minute once.
func TestTemplateSurvivesRestart(t *testing.T) {
	t.Parallel()
	// Half a minute past a minute, so no firing time falls on a start.
	clock := &fakeClock{t: time.Now().Add(time.Hour).Truncate(time.Minute).Add(30 * time.Second)}
	var opts localrun.Options
	rt := runtime(t, func(o *localrun.Options) {
		o.SchedulerClock, o.SchedulerRefresh = clock.Now, 100*time.Millisecond
		opts = *o
	})
	_, key := client(t, rt, "acme")
	tpl := inlineTemplate(t, rt, key, "* * * * *")
	rt.Close()
	rt, err := localrun.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	clock.Add(time.Minute)
	var runs []apiBatch
	eventually(t, "a run after the restart", 30*time.Second, func() bool {
		runs = runsOf(t, rt, key, tpl.ID)
		return len(runs) > 0
	})
	if len(runs) != 1 {
		t.Fatalf("one minute passed, got %d runs", len(runs))
	}
}

// A tenant's template N+1 is refused with 400 too_many_templates, before
// anything is written for it (its input keeps its expiry, no schedule is
// made); a retried create of a template it has still gets it, another
// tenant has its own allowance, and a cancel frees a slot.
func TestTemplateLimitPerTenant(t *testing.T) {
	t.Parallel()
	const max = 2
	rt := runtime(t, func(o *localrun.Options) { o.Env.MaxTemplates = max })
	ctx := context.Background()
	c, key := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(1, "x")))
	spare := upload(t, c, "spare.jsonl", jsonlRows(nRows(1, "y")))
	req := func(file string) map[string]any {
		return map[string]any{"input_file_id": file, "endpoint": "/v1/chat/completions", "schedule": "0 3 * * *"}
	}
	var tpls []apiBatch
	for i := range max {
		status, body := postBatch(t, rt, key, req(f.ID), "Idempotency-Key", fmt.Sprintf("tpl-%d", i))
		if status != 200 {
			t.Fatalf("template %d: %d %s", i+1, status, body)
		}
		tpls = append(tpls, decodeBatch(t, body))
	}
	schedules := func() int {
		out, err := rt.App.Scheduler.ListSchedules(ctx, &scheduler.ListSchedulesInput{GroupName: aws.String(rt.App.Resources.ScheduleGroup)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Schedules)
	}

	status, body := postBatch(t, rt, key, req(spare.ID))
	var e struct {
		Error struct{ Type, Code, Param, Message string }
	}
	json.Unmarshal(body, &e)
	if status != 400 || e.Error.Code != "too_many_templates" || e.Error.Param != "schedule" || !strings.Contains(e.Error.Message, "2 scheduled templates") {
		t.Fatalf("template %d: got %d %s, want 400 too_many_templates", max+1, status, body)
	}
	if n := schedules(); n != max {
		t.Fatalf("%d schedules after a refused template, want %d", n, max)
	}
	if got, err := c.Files.Get(ctx, spare.ID); err != nil || got.ExpiresAt == 0 {
		t.Fatalf("the refused template's input: expires_at %v, %v; want it kept", got.ExpiresAt, err)
	}
	// A retried create gets its template at the limit.
	if status, body := postBatch(t, rt, key, req(f.ID), "Idempotency-Key", "tpl-0"); status != 200 || decodeBatch(t, body).ID != tpls[0].ID {
		t.Fatalf("retried create at the limit: %d %s, want %s", status, body, tpls[0].ID)
	}
	// Another tenant has its own allowance.
	oc, okey := client(t, rt, "globex")
	if status, body := postBatch(t, rt, okey, req(upload(t, oc, "o.jsonl", jsonlRows(nRows(1, "z"))).ID)); status != 200 {
		t.Fatalf("another tenant's template: %d %s", status, body)
	}
	// A cancelled template gives its slot back, once.
	for i := range 2 {
		if _, err := c.Batches.Cancel(ctx, tpls[0].ID); err != nil && i == 0 {
			t.Fatalf("cancel template: %v", err)
		}
	}
	if status, body := postBatch(t, rt, key, req(spare.ID)); status != 200 {
		t.Fatalf("template after a cancel: %d %s", status, body)
	}
	if status, body := postBatch(t, rt, key, req(spare.ID)); status != 400 {
		t.Fatalf("template past the limit again: %d %s, want 400", status, body)
	}
}

// A template's max_cost holds for each of its runs as for a batch created
// with it (docs/api.md "Extensions", max_cost): the run of 20 rows that
// costs $120 in full stops at $60 of a $70 ceiling, as
// TestMaxCostStopsAtTheCeiling's batch does. Before, a run carried no
// max_cost and ran every row.
func TestTemplateRunKeepsMaxCost(t *testing.T) {
	t.Parallel()
	rt := runtime(t, withModels(t, costModels))
	c, key := client(t, rt, "ceiling")
	data, ids := costRows(20, "gpt-4o-mini", "")
	f := upload(t, c, "ceiling.jsonl", data.Bytes())
	status, body := postBatch(t, rt, key, map[string]any{"endpoint": "/v1/chat/completions", "input_file_id": f.ID,
		"completion_window": "24h", "schedule": "0 6 * * *", "max_cost": 70})
	if status != 200 {
		t.Fatalf("create template: %d %s", status, body)
	}
	tpl := decodeBatch(t, body)
	run, err := rt.App.Batches.FireTemplate(context.Background(), firing("ceiling", tpl.ID, time.Date(2030, 1, 7, 6, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	b := waitBatch(t, c, run.ID)
	out, errs := checkInvariant(t, c, b, ids)
	if codes := codesOf(errs); b.Status != "completed" || len(out) != 10 || codes["cost_limit_reached"] != 10 || b.JSON.ExtraFields["max_cost"].Raw() != "70" {
		t.Fatalf("run: %s, %d rows done, error codes %v, max_cost %s; want 10 done and 10 cost_limit_reached under max_cost 70",
			b.Status, len(out), codes, b.JSON.ExtraFields["max_cost"].Raw())
	}
}
