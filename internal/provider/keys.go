package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// KeySource finds the API key a model is called with. name is the model's
// api_key_env: an environment variable locally, a secret name on AWS. An
// empty key with no error means the source has none.
type KeySource interface {
	Key(ctx context.Context, name string) (string, error)
}

// EnvKeys reads keys from the environment.
type EnvKeys struct{}

func (EnvKeys) Key(_ context.Context, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	return os.Getenv(name), nil
}

// SecretsAPI is the part of Secrets Manager SecretsKeys needs.
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

var _ SecretsAPI = (*secretsmanager.Client)(nil)

// secretTTL is how long a fetched key is reused: every row needs one, and
// Secrets Manager both charges per call and throttles; five minutes still
// picks up a rotated key soon enough.
const secretTTL = 5 * time.Minute

// SecretsKeys reads keys from Secrets Manager, secret id Prefix+name, and
// caches each for secretTTL by Now, the service's one clock (app.New).
// Use it by pointer; it is safe for concurrent use.
type SecretsKeys struct {
	Client SecretsAPI
	Prefix string
	Now    func() time.Time

	mu      sync.Mutex
	secrets map[string]*cachedSecret
}

// cachedSecret has its own lock so that rows starting together wait for one
// fetch of their key instead of each making one, without serialising the
// fetches of different keys.
type cachedSecret struct {
	mu      sync.Mutex
	value   string
	fetched time.Time
}

func (s *SecretsKeys) Key(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	s.mu.Lock()
	if s.secrets == nil {
		s.secrets = make(map[string]*cachedSecret)
	}
	e, ok := s.secrets[name]
	if !ok {
		e = &cachedSecret{}
		s.secrets[name] = e
	}
	s.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.fetched.IsZero() && s.Now().Sub(e.fetched) < secretTTL {
		return e.value, nil
	}
	id := s.Prefix + name
	out, err := s.Client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		// No such secret is "no key here", which lets a ChainKeys go on;
		// it is cached like a value so a missing secret is not asked for
		// on every row.
		e.value = ""
	case err != nil:
		return "", fmt.Errorf("get secret %s: %w", id, err)
	default:
		e.value = aws.ToString(out.SecretString)
	}
	e.fetched = s.Now()
	return e.value, nil
}

// Forget drops every cached key: the next use of each reads its secret, as
// a new execution environment does.
func (s *SecretsKeys) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = nil
}

// ChainKeys asks each source in turn; the first non-empty key wins. Listing
// the environment before Secrets Manager lets the same wiring run locally
// and on AWS.
type ChainKeys []KeySource

func (c ChainKeys) Key(ctx context.Context, name string) (string, error) {
	var errs []error
	for _, src := range c {
		key, err := src.Key(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if key != "" {
			return key, nil
		}
	}
	// A source that failed may have held the key, so "no key" would be a lie.
	return "", errors.Join(errs...)
}

var (
	_ KeySource = EnvKeys{}
	_ KeySource = (*SecretsKeys)(nil)
	_ KeySource = ChainKeys(nil)
)
