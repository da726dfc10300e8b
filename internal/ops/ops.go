// Package ops is what an operator reads of the running service: each
// model's capacity in use and the batches waiting for it, the chunks whose
// lease ended, the dead-letter queues' depths and the upstream answers the
// executor counted (docs/runbook.md). relay admin and the panel's
// Operations page (GET /v1/admin/operations) read it through the same
// functions.
package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/metrics"
	"github.com/relaybatch/relay/internal/queue"
	"github.com/relaybatch/relay/internal/resources"
	"github.com/relaybatch/relay/internal/sched"
)

// Store is what the reports read of the table (store.Store).
type Store interface {
	KeyStore
	CapShards(ctx context.Context, model string) (map[int]int, error)
	ReadyEntries(ctx context.Context, model string) ([]sched.Ready, error)
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]batch.Chunk, error)
}

// ModelReport is one model's capacity in use and the batches waiting for it.
type ModelReport struct {
	Model    string `json:"model"`
	Capacity int    `json:"max_concurrency"`
	InFlight int    `json:"in_flight"`
	// Shards are each capacity shard's slots in flight of its quota.
	Shards []ShardReport `json:"shards"`
	// Waiting are the batches with chunks of the model waiting, in the
	// order claims take them (docs/design.md "Scheduling").
	Waiting []sched.Ready `json:"waiting"`
	// OverQuota names shards holding more than their quota: a broken
	// promise (docs/runbook.md "in-flight-not-zero").
	OverQuota []int `json:"over_quota,omitempty"`
	// Keys are the model's keys and their limiters' state.
	Keys []KeyReport `json:"keys"`
}

// ShardReport is one capacity shard's slots in use.
type ShardReport struct {
	Shard    int `json:"shard"`
	InFlight int `json:"in_flight"`
	Quota    int `json:"quota"`
}

// ReportModel adds a model's shards (slots in flight by shard) up against
// their quotas.
func ReportModel(name string, quotas []int, shards map[int]int, ready []sched.Ready) ModelReport {
	r := ModelReport{Model: name, Waiting: ready}
	for k, q := range quotas {
		r.Capacity += q
		r.InFlight += shards[k]
		r.Shards = append(r.Shards, ShardReport{Shard: k, InFlight: shards[k], Quota: q})
		if shards[k] > q {
			r.OverQuota = append(r.OverQuota, k)
		}
	}
	if r.Waiting == nil {
		r.Waiting = []sched.Ready{}
	}
	return r
}

// Models is relay admin models: each configured model's report at now,
// in the models file's order.
func Models(ctx context.Context, s Store, models *config.Models, now time.Time) ([]ModelReport, error) {
	out := []ModelReport{}
	for _, m := range models.Models {
		shards, err := s.CapShards(ctx, m.Name)
		if err != nil {
			return nil, err
		}
		ready, err := s.ReadyEntries(ctx, m.Name)
		if err != nil {
			return nil, err
		}
		r := ReportModel(m.Name, sched.Quotas(m.MaxConcurrency), shards, ready)
		if r.Keys, err = Keys(ctx, s, m, now); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ClaimedChunk is a chunk held by a run: its lease and its holder.
type ClaimedChunk struct {
	Batch    string    `json:"batch_id"`
	Tenant   string    `json:"tenant"`
	Chunk    int       `json:"chunk"`
	Model    string    `json:"model"`
	Run      string    `json:"run"`
	Attempts int       `json:"attempts"`
	Slots    int       `json:"slots"`
	Shard    int       `json:"shard"`
	Lease    time.Time `json:"lease_until"`
}

// Claimed is claimed chunk c as the reports show it.
func Claimed(c batch.Chunk) ClaimedChunk {
	return ClaimedChunk{Batch: c.Batch, Tenant: c.Tenant, Chunk: c.Index, Model: c.Model, Run: c.Run, Attempts: c.Attempts,
		Slots: c.Slots, Shard: c.Shard, Lease: time.UnixMilli(c.Lease).UTC()}
}

// LeaseEnded says how long ago claimed chunk c's lease ended at now (0 or
// less: it has not): a chunk stuck until the tick takes it over
// (docs/runbook.md "chunk-stuck").
func LeaseEnded(c ClaimedChunk, now time.Time) time.Duration { return now.Sub(c.Lease) }

// maxStuck bounds the stuck chunks an overview lists.
const maxStuck = 100

// Stuck are the claimed chunks whose lease ended at now, at most maxStuck.
func Stuck(ctx context.Context, s Store, now time.Time) ([]ClaimedChunk, error) {
	cs, err := s.ExpiredLeases(ctx, now, maxStuck)
	if err != nil {
		return nil, err
	}
	out := []ClaimedChunk{}
	for _, c := range cs {
		out = append(out, Claimed(c))
	}
	return out, nil
}

// DLQKeys are the queues whose dead-letter queue relay admin dlq reads.
var DLQKeys = []string{resources.Dispatch, resources.Work, resources.Finalize, resources.Webhook}

// DLQDepths is each dead-letter queue's approximate depth (visible and in
// flight), by its source queue's key.
func DLQDepths(ctx context.Context, q *queue.Sender) (map[string]int, error) {
	out := map[string]int{}
	var errs []error
	for _, key := range DLQKeys {
		url, err := q.URL(ctx, key+"-dlq")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a, err := q.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			errs = append(errs, fmt.Errorf("depth of %s-dlq: %w", key, err))
			continue
		}
		n := 0
		for _, name := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
			v, _ := strconv.Atoi(a.Attributes[string(name)])
			n += v
		}
		out[key] = n
	}
	return out, errors.Join(errs...)
}

// Overview is the panel's Operations page: what relay admin models shows,
// the stuck chunks, the DLQ depths and the upstream answers of the rows
// this process's executor committed (metrics.Recent: the figures its
// metric lines carry; in a deployment the api function runs no rows, and
// the dashboard has them).
type Overview struct {
	At       time.Time        `json:"at"`
	Models   []ModelReport    `json:"models"`
	Stuck    []ClaimedChunk   `json:"stuck_chunks"`
	DLQs     map[string]int   `json:"dead_letter_queues"`
	Upstream metrics.Snapshot `json:"upstream"`
}

// Service builds the overview.
type Service struct {
	Store  Store
	Models *config.Models
	Queue  *queue.Sender
	Recent *metrics.Recent
	Now    func() time.Time
}

// Overview reads the overview now for an admin key of tenant: the
// batches it names (waiting, stuck) are the tenant's only, as a key acts
// as its tenant (SECURITY.md "Actors"); the figures are the service's.
func (s *Service) Overview(ctx context.Context, tenant string) (Overview, error) {
	now := s.Now()
	o := Overview{At: now.UTC(), Upstream: s.Recent.Snapshot(now)}
	var err error
	if o.Models, err = Models(ctx, s.Store, s.Models, now); err != nil {
		return o, err
	}
	if o.Stuck, err = Stuck(ctx, s.Store, now); err != nil {
		return o, err
	}
	o.DLQs, err = DLQDepths(ctx, s.Queue)
	return Of(o, tenant), err
}

// Of is o with only tenant's batches named: in each model's waiting
// batches and in the stuck chunks.
func Of(o Overview, tenant string) Overview {
	models := make([]ModelReport, len(o.Models))
	for i, m := range o.Models {
		m.Waiting = slices.DeleteFunc(slices.Clone(m.Waiting), func(r sched.Ready) bool { return r.Tenant != tenant })
		models[i] = m
	}
	o.Models = models
	o.Stuck = slices.DeleteFunc(slices.Clone(o.Stuck), func(c ClaimedChunk) bool { return c.Tenant != tenant })
	return o
}
