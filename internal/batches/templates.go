package batches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/file"
	"github.com/relaybatch/relay/internal/files"
	"github.com/relaybatch/relay/internal/ids"
	"github.com/relaybatch/relay/internal/jsonl"
	"github.com/relaybatch/relay/internal/schedule"
	"github.com/relaybatch/relay/internal/store"
)

// Cron templates (docs/api.md "Templates"). A template is a batch record
// in status scheduled, with its schedule and the input, endpoint, window
// and options of its runs, and no runs of its own; an EventBridge Scheduler
// schedule named after it invokes the scheduler function (Fire) with the
// template id and the firing's scheduled time, and each firing records a
// run exactly as a create would, with template_id set.
//
// Expiry uses the engine's periodic tick, not one Scheduler schedule per
// batch: the tick (a one-minute rate schedule in AWS, TickEvery locally)
// already looks at every active batch when it is due, the end of its
// window included, and a batch past expires_at ends expired, keeping the
// rows that finished (docs/design.md "Tick", "Scheduling"). A one-time
// at() schedule per batch would add a CreateSchedule to every create
// (Scheduler's API rate and schedule-count quotas then bound the create
// rate), a DeleteSchedule to every batch that ends early (or a firing for
// nothing), and one more way for a create to fail, to gain precision
// nobody needs: a window is 1 to 24 hours, and the tick enforces it within
// a minute, whether or not any executor runs.

// createTemplate records b as a template on spec and creates its schedule.
// The record comes first, so a firing always finds its template; when the
// schedule cannot be created the template is ended (endTemplate), so no
// scheduled template is left without a schedule.
func (s *Service) createTemplate(ctx context.Context, b batch.Batch, spec schedule.Spec, idem store.IdemKey) (batch.Batch, error) {
	if s.Schedules == nil {
		return batch.Batch{}, errors.New("create template: no schedule manager configured")
	}
	if err := s.checkTemplates(ctx, b.Tenant); err != nil {
		return batch.Batch{}, err
	}
	b.Status = batch.Scheduled
	b.Schedule, b.ScheduleTimezone = &spec.Cron, &spec.Timezone
	b.ExpiresAt = nil // each run has its own window
	// Runs read the input for as long as the template is scheduled, so it
	// must not expire meanwhile (docs/api.md "Files"); cancelling the
	// template gives it an expiry again.
	if err := s.Files.SetExpiresAt(ctx, b.Tenant, b.InputFileID, nil); err != nil {
		return batch.Batch{}, fmt.Errorf("create template: keep its input: %w", err)
	}
	saved, err := s.record(ctx, b, idem)
	if err != nil {
		return batch.Batch{}, err
	}
	if saved.Status != batch.Scheduled {
		return saved, nil // a retried create of a template cancelled since
	}
	// Creating it again (a retried create) returns the existing schedule.
	if _, err := s.Schedules.Create(ctx, b.Tenant, saved.ID, spec); err != nil {
		if _, cerr := s.endTemplate(ctx, b.Tenant, saved.ID); cerr != nil {
			s.Log.ErrorContext(ctx, "cancel template without a schedule", "batch_id", saved.ID, "tenant", b.Tenant, "err", cerr)
		}
		return batch.Batch{}, fmt.Errorf("create template %s: %w", saved.ID, err)
	}
	return saved, nil
}

// cancelTemplate deletes a template's schedule, then cancels it. The
// schedule goes first: a template left scheduled after a failed delete can
// be cancelled again, while a cancelled one whose schedule lived on would
// keep invoking the scheduler function (which then deletes it, see Fire).
// Errors in why are recorded on the template (its errors field).
func (s *Service) cancelTemplate(ctx context.Context, tenant, id string, why ...jsonl.LineError) (batch.Batch, error) {
	if s.Schedules != nil {
		if err := s.Schedules.Delete(ctx, id); err != nil {
			return batch.Batch{}, fmt.Errorf("cancel template %s: %w", id, err)
		}
	}
	return s.endTemplate(ctx, tenant, id, why...)
}

// endTemplate cancels a template that has no schedule (any more) and does
// what follows: its input expires again, its Terminal gives back its slot
// and its hold on the input, and queues its webhook.
func (s *Service) endTemplate(ctx context.Context, tenant, id string, why ...jsonl.LineError) (batch.Batch, error) {
	b, err := s.Store.UpdateBatch(ctx, tenant, id, func(b *batch.Batch) error {
		if b.Status == batch.Cancelled {
			return errSkip
		}
		b.ErrorList = append(b.ErrorList, why...)
		return b.To(batch.Cancelled, s.Now())
	})
	if errors.Is(err, errSkip) {
		// Cancelled already: by a concurrent cancel, or by this one's write
		// that took effect but answered an error, then was retried. What
		// follows is idempotent and may not have happened yet: it runs.
		b, err = s.Store.GetBatch(ctx, tenant, id)
	}
	if err != nil {
		return batch.Batch{}, err
	}
	// Its input, kept while it was scheduled, expires as an upload's would.
	// A failure leaves a file that never expires, which is logged, not
	// returned: the cancel itself is done.
	exp := s.Now().Add(files.DefaultTTL).Unix()
	if err := s.Files.SetExpiresAt(ctx, tenant, b.InputFileID, &exp); err != nil && !errors.Is(err, file.ErrNotFound) {
		s.Log.ErrorContext(ctx, "expire input of cancelled template", "batch_id", id, "tenant", tenant, "err", err)
	}
	// The template is cancelled whatever happens to its webhook; a failure
	// to queue it is logged, not returned: the cancel itself is done.
	// A template holds a template slot, no in-flight one (createCounted):
	// its Terminal gives back the slot and its hold on its input file,
	// and queues the webhook.
	if err := s.Terminal(ctx, b); err != nil {
		s.Log.ErrorContext(ctx, "queue webhook of cancelled template", "batch_id", id, "tenant", tenant, "err", err)
	}
	return s.Get(ctx, tenant, id)
}

// Fire is the scheduler function's handler: EventBridge Scheduler (or the
// local Firer) invokes it with a template schedule's input. Errors it
// returns are worth a retry (Scheduler retries, the run is idempotent);
// firings that can never succeed are logged and dropped.
func (s *Service) Fire(ctx context.Context, input json.RawMessage) error {
	_, err := s.FireTemplate(ctx, input)
	if errs.Is(err, errs.Invalid) || errs.Is(err, errs.NotFound) {
		s.Log.ErrorContext(ctx, "schedule firing dropped", "err", err)
		return nil
	}
	return err
}

// FireTemplate records the run of a template for one firing, input being
// the schedule's input (schedule.Input) with the scheduled time filled in.
// A firing delivered twice records one run: the run is created with an
// idempotency key made of the template and the scheduled time. A template
// that is no longer scheduled records nothing, and its schedule, if still
// there, is deleted. A template whose key may no longer run it
// (keyRefusal) records nothing either: it is cancelled with the reason in
// its errors, and returned.
func (s *Service) FireTemplate(ctx context.Context, input []byte) (batch.Batch, error) {
	var in schedule.Input
	if err := json.Unmarshal(input, &in); err != nil || !ids.Valid("batch_", in.TemplateID) || in.Tenant == "" {
		return batch.Batch{}, errs.Invalidf("input", "schedule input %.200q is not a template firing", input)
	}
	at, err := in.At()
	if err != nil {
		return batch.Batch{}, errs.Invalidf("scheduled_time", "%v", err)
	}
	log := s.Log.With("template_id", in.TemplateID, "tenant", in.Tenant, "scheduled_time", at)
	tpl, err := s.Store.GetBatch(ctx, in.Tenant, in.TemplateID)
	if err != nil && !errors.Is(err, store.ErrBatchNotFound) {
		return batch.Batch{}, err
	}
	if err != nil || tpl.Status != batch.Scheduled {
		log.WarnContext(ctx, "firing of a template that is not scheduled: deleting its schedule", "status", tpl.Status)
		if s.Schedules != nil {
			if err := s.Schedules.Delete(ctx, in.TemplateID); err != nil {
				return batch.Batch{}, err
			}
		}
		return batch.Batch{}, errs.NotFoundf("template %s is not scheduled", in.TemplateID)
	}
	k, err := s.Store.KeyByID(ctx, tpl.KeyID)
	if err != nil && !errors.Is(err, apikey.ErrNoKey) {
		return batch.Batch{}, fmt.Errorf("check the key of template %s: %w", tpl.ID, err)
	}
	now := s.Now()
	if code, why := keyRefusal(tpl, k, err == nil, now); code != "" {
		log.WarnContext(ctx, "template stopped: its key may no longer run it", "key_id", tpl.KeyID, "reason", why)
		return s.cancelTemplate(ctx, tpl.Tenant, tpl.ID, jsonl.LineError{Code: code, Message: why})
	}
	window, err := ParseWindow(tpl.CompletionWindow)
	if err != nil {
		return batch.Batch{}, err
	}
	exp := now.Add(window).Unix()
	run := batch.Batch{
		ID: ids.New("batch_"), Endpoint: tpl.Endpoint, CompletionWindow: tpl.CompletionWindow, Status: batch.Validating,
		CreatedAt: now.Unix(), ExpiresAt: &exp, Metadata: tpl.Metadata, Priority: tpl.Priority, Tenant: tpl.Tenant, KeyID: tpl.KeyID,
		InputFileID: tpl.InputFileID, TemplateID: &tpl.ID, WebhookURL: tpl.WebhookURL, FallbackModel: tpl.FallbackModel,
		OutputExpiresAfter: tpl.OutputExpiresAfter, CSVModel: tpl.CSVModel,
	}
	if tpl.MaxCost != nil {
		// Each run within the template's max_cost, its holds its own.
		run.MaxCost, run.CostHolds = tpl.MaxCost, map[string]float64{}
	}
	// The input is not re-validated here: a file deleted since the template
	// was made fails the run in planning (input_file_missing), visibly.
	saved, err := s.record(ctx, run, store.IdemKey{Key: apikey.Hash(runKey(tpl.ID, at))})
	if err != nil {
		return batch.Batch{}, fmt.Errorf("record run of template %s at %s: %w", tpl.ID, in.ScheduledTime, err)
	}
	if saved.ID == run.ID {
		log.InfoContext(ctx, "template fired", "batch_id", saved.ID)
	}
	return saved, nil
}

// CodeKeyDisabled is the error a template records when the key that
// created it may no longer run it (api_key_expired and tenant_disabled
// when that is why).
const CodeKeyDisabled = apikey.CodeDisabled

// keyRefusal says why template tpl may not run with k, the key that
// created it (found tells whether it still exists), at now: a code and a
// reason, or "" when it may. A template spends as its key would, so it runs
// only while a request with that key would be let in: the key exists, is
// not disabled or expired, belongs to the template's tenant, which is not
// disabled, and holds the batches scope.
func keyRefusal(tpl batch.Batch, k apikey.Key, found bool, now time.Time) (code, why string) {
	stop := func(why string) string {
		return fmt.Sprintf("the API key %s that created this template %s: the template no longer runs; create it again with an active key", tpl.KeyID, why)
	}
	switch code, why := k.Refusal(now); {
	case !found:
		return CodeKeyDisabled, stop("no longer exists")
	case code == apikey.CodeDisabled:
		return code, stop("is disabled")
	case code != "":
		return code, stop("may no longer be used (" + why + ")")
	case k.Tenant != tpl.Tenant:
		return CodeKeyDisabled, stop("belongs to another tenant")
	case !(auth.Principal{Scopes: k.Scopes}).Can(auth.ScopeBatches):
		return CodeKeyDisabled, stop("lacks the batches scope")
	}
	return "", ""
}

// runKey is the idempotency key of a template's run at a scheduled time. It
// shares the tenant's Idempotency-Key namespace, so it holds a NUL, which
// no HTTP header value can, and starts with no route (NewIdemKey): a
// client's key never collides with it.
func runKey(templateID string, at time.Time) string {
	return "template-run\x00" + templateID + "\x00" + at.UTC().Format(time.RFC3339)
}
