package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/config"
	"github.com/relaybatch/relay/internal/webhook"
)

// Operator endpoints (docs/api.md "Operator webhooks"): relay.yaml's
// operator_webhooks, each receiving every tenant's batch events of the
// types it wants. An event goes to each as a message of its own
// (message.Endpoint), with the batch's own event id and body, a delivery
// record per endpoint (webhook.Record), one circuit per endpoint
// (webhook.OperatorCircuit), the same retries and address policy, and the
// endpoint's secret instead of the tenant's. They hold no tenant's pending
// slot.

// OperatorKeys finds an operator endpoint's secret by its secret_env, as
// model keys are found (provider.ChainKeys: the environment, then Secrets
// Manager); "" with no error when there is none.
type OperatorKeys interface {
	Key(ctx context.Context, name string) (string, error)
}

// errNoOperatorSecret is an operator endpoint whose secret is nowhere.
var errNoOperatorSecret = errors.New("no secret")

// operatorsOf returns the operator endpoints that want events of type
// eventType.
func (s *Service) operatorsOf(eventType string) []config.OperatorWebhook {
	var out []config.OperatorWebhook
	for _, op := range s.Operators {
		if op.Wants(eventType) {
			out = append(out, op)
		}
	}
	return out
}

// operator returns the configured endpoint named name.
func (s *Service) operator(name string) (config.OperatorWebhook, bool) {
	i := slices.IndexFunc(s.Operators, func(op config.OperatorWebhook) bool { return op.Name == name })
	if i < 0 {
		return config.OperatorWebhook{}, false
	}
	return s.Operators[i], true
}

// Announces reports whether batch b's events go anywhere: to its
// webhook_url, or to an operator endpoint (engine.Lifecycle).
func (s *Service) Announces(b batch.Batch) bool {
	return b.WebhookURL != nil && *b.WebhookURL != "" || len(s.Operators) > 0
}

// wanted are the event types of after that op receives: its first attempt
// waits only for those, as the others never come to it.
func wanted(op config.OperatorWebhook, after []string) []string {
	var out []string
	for _, t := range after {
		if op.Wants(t) {
			out = append(out, t)
		}
	}
	return out
}

// current returns m as the configuration has it now: a message to an
// operator endpoint goes to the endpoint's URL of now, not the one it was
// queued with (a moved endpoint's old URL must not keep getting every
// tenant's events, signed, for a day of retries); false (logged) when the
// endpoint is no longer configured or no longer wants the event: it is
// dropped, as the endpoint was.
func (s *Service) current(ctx context.Context, m message) (message, bool) {
	if m.Endpoint == "" {
		return m, true
	}
	op, ok := s.operator(m.Endpoint)
	switch {
	case !ok || s.OperatorKeys == nil:
		s.Log.WarnContext(ctx, "webhook to an operator endpoint no longer configured dropped", "endpoint", m.Endpoint,
			"batch_id", m.Batch, "event_id", m.Event.ID)
		return m, false
	case !op.Wants(m.Event.Type):
		s.Log.WarnContext(ctx, "webhook to an operator endpoint that no longer wants its type dropped", "endpoint", m.Endpoint,
			"batch_id", m.Batch, "event_id", m.Event.ID, "event", m.Event.Type)
		return m, false
	}
	m.URL = op.URL
	return m, true
}

// record names m's delivery record of its batch's event of type eventType.
func (m message) record(eventType string) string { return webhook.Record(m.Endpoint, eventType) }

// circuit names the circuit m's attempts go through: the tenant's of its
// receiver, or its operator endpoint's, shared by every tenant.
func (m message) circuit() string {
	if m.Endpoint != "" {
		return webhook.OperatorCircuit(m.Endpoint, m.URL)
	}
	return webhook.CircuitOf(m.Tenant, m.URL)
}

// secret is what m is signed with: its tenant's webhook secret, or its
// operator endpoint's. An endpoint whose secret is missing is an error:
// the message comes back rather than going unsigned.
func (s *Service) secret(ctx context.Context, m message) (string, error) {
	if m.Endpoint == "" {
		secret, err := auth.WebhookSecret(ctx, s.Store, m.Tenant)
		if err != nil {
			return "", fmt.Errorf("webhook secret of %s: %w", m.Tenant, err)
		}
		return secret, nil
	}
	op, ok := s.operator(m.Endpoint)
	if !ok || s.OperatorKeys == nil { // dropped before: s.current
		return "", fmt.Errorf("operator endpoint %s: not configured (relay.yaml operator_webhooks)", m.Endpoint)
	}
	secret, err := s.OperatorKeys.Key(ctx, op.SecretEnv)
	if err == nil && secret == "" {
		err = errNoOperatorSecret
	}
	if err != nil {
		return "", fmt.Errorf("operator endpoint %s: secret %s: %w", m.Endpoint, op.SecretEnv, err)
	}
	return secret, nil
}
