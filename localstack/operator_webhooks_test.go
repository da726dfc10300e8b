package localstack

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// An operator endpoint (relay.yaml operator_webhooks, docs/api.md
// "Operator webhooks") gets every tenant's batch events, batches without
// a webhook_url included, signed with its secret from Secrets Manager; an
// endpoint that wants only batch.completed gets no other type.
func TestOperatorWebhookGetsEveryTenantsEvents(t *testing.T) {
	t.Parallel()
	all, completions := newHookReceiver(t, nil), newHookReceiver(t, nil)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("operator-%d-0123456789abcdef", time.Now().UnixNano())))
	secretEnv := fmt.Sprintf("RELAY_TEST_OPS_%d", time.Now().UnixNano())
	rt := runtime(t, withModels(t, testModels+fmt.Sprintf(`
operator_webhooks:
  - {name: ops, url: %s/all, secret_env: %s}
  - {name: billing, url: %s/done, secret_env: %s, events: [batch.completed]}
`, all.URL, secretEnv, completions.URL, secretEnv)), func(o *localrun.Options) { o.Env.SecretPrefix = "ops-test/" })
	// The deployed path: the secret is in Secrets Manager, named as a
	// model key's is (the secret prefix and secret_env).
	sm := secretsmanager.NewFromConfig(rt.App.AWS)
	if _, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String("ops-test/" + secretEnv), SecretString: aws.String(secret)}); err != nil {
		t.Fatal(err)
	}

	batches := map[string]string{} // batch id → tenant
	for _, tenant := range []string{"acme", "globex"} {
		c, _ := client(t, rt, tenant)
		f := upload(t, c, "in.jsonl", jsonlRows(nRows(12, tenant)))
		b := createBatch(t, c, f.ID)
		if done := waitBatch(t, c, b.ID); done.Status != "completed" {
			t.Fatalf("%s's batch ended %s", tenant, done.Status)
		}
		batches[b.ID] = tenant
	}
	eventually(t, "both completions at both endpoints", time.Minute, func() bool {
		return len(all.ofType("batch.completed")) == 2 && len(completions.ofType("batch.completed")) == 2
	})

	hooks := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	// events lists, per batch, the types an endpoint got in order, each
	// verified with the operator's secret.
	events := func(r *hookReceiver) map[string][]string {
		got := map[string][]string{}
		for _, q := range r.got() {
			if err := hooks.Webhooks.VerifySignature(q.body, q.header); err != nil {
				t.Fatalf("%s: signature with the operator's secret: %v", q.body, err)
			}
			var ev struct {
				Type string
				Data struct{ ID string }
			}
			json.Unmarshal(q.body, &ev)
			got[ev.Data.ID] = append(got[ev.Data.ID], ev.Type)
		}
		return got
	}
	wantAll, wantDone := map[string][]string{}, map[string][]string{}
	for id := range batches {
		wantAll[id] = []string{"batch.queued", "batch.in_progress", "batch.completed"}
		wantDone[id] = []string{"batch.completed"}
	}
	if got := events(all); !reflect.DeepEqual(got, wantAll) {
		t.Errorf("endpoint of every event got %v, want %v", got, wantAll)
	}
	if got := events(completions); !reflect.DeepEqual(got, wantDone) {
		t.Errorf("endpoint of batch.completed got %v, want %v", got, wantDone)
	}
	var tenants []string
	for _, tenant := range batches {
		tenants = append(tenants, tenant)
	}
	sort.Strings(tenants)
	if !reflect.DeepEqual(tenants, []string{"acme", "globex"}) {
		t.Fatalf("batches of %v, want both tenants'", tenants)
	}
}
