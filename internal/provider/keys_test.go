package provider

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// fakeSecrets is a SecretsAPI whose answer is a function; it counts calls.
type fakeSecrets struct {
	calls atomic.Int64
	get   func(id string) (string, error)
}

func (f *fakeSecrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.calls.Add(1)
	v, err := f.get(aws.ToString(in.SecretId))
	if err != nil {
		return nil, err
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

var secretValues = map[string]string{
	"relay/ONLY_IN_SECRETS": "sk-secret",
	"relay/IN_BOTH":         "sk-from-secrets",
}

func storedSecret(id string) (string, error) {
	if v, ok := secretValues[id]; ok {
		return v, nil
	}
	return "", &types.ResourceNotFoundException{Message: aws.String("no " + id)}
}

// clock is a settable time for the cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestChainKeys cannot be parallel: it sets environment variables.
func TestChainKeys(t *testing.T) {
	t.Setenv("IN_BOTH", "sk-from-env")
	t.Setenv("ONLY_IN_SECRETS", "")
	ctx := context.Background()
	tests := []struct {
		name      string
		key       string
		want      string
		wantCalls int64
	}{
		{"env first, Secrets Manager not asked", "IN_BOTH", "sk-from-env", 0},
		{"Secrets Manager when env is empty", "ONLY_IN_SECRETS", "sk-secret", 1},
		{"nowhere is empty, not an error", "NOWHERE", "", 1},
		{"no key name asks no one", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sm := &fakeSecrets{get: storedSecret}
			keys := ChainKeys{EnvKeys{}, &SecretsKeys{Client: sm, Prefix: "relay/", Now: time.Now}}
			got, err := keys.Key(ctx, tt.key)
			if err != nil || got != tt.want {
				t.Errorf("Key(%q) = %q, %v; want %q, nil", tt.key, got, err, tt.want)
			}
			if n := sm.calls.Load(); n != tt.wantCalls {
				t.Errorf("Secrets Manager called %d times, want %d", n, tt.wantCalls)
			}
		})
	}
}

func TestChainKeysError(t *testing.T) {
	t.Parallel()
	boom := errors.New("throttled")
	sm := &fakeSecrets{get: func(string) (string, error) { return "", boom }}
	keys := ChainKeys{mapKeys{}, &SecretsKeys{Client: sm, Prefix: "relay/", Now: time.Now}}
	if _, err := keys.Key(context.Background(), "K"); !errors.Is(err, boom) {
		t.Errorf("Key = %v, want the Secrets Manager error", err)
	}
	// A failure is not cached: the next row asks again.
	keys.Key(context.Background(), "K")
	if n := sm.calls.Load(); n != 2 {
		t.Errorf("Secrets Manager called %d times, want 2", n)
	}
	// A source that has the key makes another's failure irrelevant.
	keys = ChainKeys{&SecretsKeys{Client: sm, Now: time.Now}, mapKeys{"K": "sk-map"}}
	if got, err := keys.Key(context.Background(), "K"); err != nil || got != "sk-map" {
		t.Errorf("Key = %q, %v; want sk-map, nil", got, err)
	}
}

func TestSecretsKeysCache(t *testing.T) {
	t.Parallel()
	sm := &fakeSecrets{get: storedSecret}
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	keys := &SecretsKeys{Client: sm, Prefix: "relay/", Now: clk.Now}
	ctx := context.Background()

	// Rows starting together share one fetch.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if got, err := keys.Key(ctx, "ONLY_IN_SECRETS"); err != nil || got != "sk-secret" {
				t.Errorf("Key = %q, %v; want sk-secret, nil", got, err)
			}
		})
	}
	wg.Wait()
	if n := sm.calls.Load(); n != 1 {
		t.Errorf("after 50 concurrent lookups: %d calls, want 1", n)
	}

	clk.Add(4 * time.Minute)
	keys.Key(ctx, "ONLY_IN_SECRETS")
	if n := sm.calls.Load(); n != 1 {
		t.Errorf("within 5 minutes: %d calls, want 1 (cached)", n)
	}
	clk.Add(2 * time.Minute)
	keys.Key(ctx, "ONLY_IN_SECRETS")
	if n := sm.calls.Load(); n != 2 {
		t.Errorf("after 6 minutes: %d calls, want 2 (refetched)", n)
	}
	keys.Key(ctx, "IN_BOTH")
	if n := sm.calls.Load(); n != 3 {
		t.Errorf("another name: %d calls, want 3 (cached per name)", n)
	}
	keys.Forget()
	keys.Key(ctx, "IN_BOTH")
	if n := sm.calls.Load(); n != 4 {
		t.Errorf("after Forget: %d calls, want 4 (read again)", n)
	}
}
