package store

import (
	"context"
	"sync"
	"testing"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/awsfault"
	"github.com/relaybatch/relay/internal/local/emulator/emutest"
)

// A key's writes (disable, tenant disable, rotation) race each other: each
// reads the key, then writes. These tests run the other write in between,
// at the first call of op by a store on the same table.

// interleaved is s's table through a client that runs between once, just
// before its first call of op.
func interleaved(t *testing.T, s *Store, op string, between func()) *Store {
	return interleavedAt(t, s, op, 1, between)
}

// interleavedAt is s's table through a client that runs between just
// before its nth call of op.
func interleavedAt(t *testing.T, s *Store, op string, nth int, between func()) *Store {
	t.Helper()
	var mu sync.Mutex
	calls := 0
	hook := func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("interleave", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if awsmiddleware.GetOperationName(ctx) == op {
				mu.Lock()
				calls++
				if calls == nth {
					between()
				}
				mu.Unlock()
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
	}
	db := dynamodb.NewFromConfig(emutest.Config(t), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, hook) })
	return New(db, s.Table)
}

// putTestKey stores a key of tenant and returns it.
func putTestKey(t *testing.T, s *Store, secret, tenant string) apikey.Key {
	t.Helper()
	h := apikey.Hash(secret)
	k := apikey.Key{Hash: h, ID: h[:12], Tenant: tenant, Scopes: []string{"batches"}, CreatedAt: time.Now().Unix()}
	if err := s.PutKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return k
}

// rotated is k with the new secret's hash, as auth.Rotate makes it.
func rotated(k apikey.Key, secret string) apikey.Key {
	next := k
	next.Hash, next.PreviousHash = apikey.Hash(secret), k.Hash
	return next
}

// A rotation that read the key before a disable must not write it back
// enabled: the disable would be lost, and both secrets would work.
func TestRotationDoesNotUndoADisable(t *testing.T) {
	t.Parallel()
	s := emulatorStore(t)
	ctx := context.Background()
	k := putTestKey(t, s, "rb-old", "acme")
	old, err := s.KeyByID(ctx, k.ID) // auth.Rotate's read
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DisableKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	rerr := s.RotateKey(ctx, old, rotated(old, "rb-new"), time.Now().Add(time.Hour))
	got, err := s.KeyByID(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rerr == nil || !got.Disabled {
		t.Fatalf("rotation after a disable: err %v, key disabled %v; want the rotation refused and the key disabled", rerr, got.Disabled)
	}
	if nk, err := s.GetKey(ctx, apikey.Hash("rb-new")); err == nil && !nk.Disabled {
		t.Fatalf("the new secret's record %+v works: the disable was lost", nk)
	}
}

// A disable that read the key before a rotation disables the key's new
// secret too, and leaves the old secret's record replaced (its overlap
// still ends).
func TestDisableRacingARotation(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	ctx := context.Background()
	k := putTestKey(t, base, "rb-old", "acme")
	until := time.Now().Add(time.Hour)
	s := interleaved(t, base, "TransactWriteItems", func() {
		if err := base.RotateKey(ctx, k, rotated(k, "rb-new"), until); err != nil {
			t.Error(err)
		}
	})
	if err := s.DisableKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	nk, err := base.GetKey(ctx, apikey.Hash("rb-new"))
	if err != nil {
		t.Fatal(err)
	}
	ok, err := base.GetKey(ctx, apikey.Hash("rb-old"))
	if err != nil {
		t.Fatal(err)
	}
	byID, err := base.KeyByID(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !nk.Disabled || !byID.Disabled || byID.Hash != nk.Hash {
		t.Fatalf("after a disable racing a rotation: new secret's record %+v, the id's %+v; want both disabled, the id's naming the new secret", nk, byID)
	}
	if ok.ReplacedUntil != until.Unix() {
		t.Fatalf("the old secret's record %+v lost its replaced_until %d: it works past its overlap", ok, until.Unix())
	}
}

// A tenant disable that listed the keys before one was disabled keeps it
// disabled: enabling the tenant later must not bring the key back.
func TestTenantDisableKeepsAKeyDisabledMeanwhile(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	ctx := context.Background()
	k := putTestKey(t, base, "rb-one", "acme")
	s := interleaved(t, base, "TransactWriteItems", func() {
		if err := base.DisableKey(ctx, k.ID); err != nil {
			t.Error(err)
		}
	})
	if _, err := s.SetTenantDisabled(ctx, "acme", true); err != nil {
		t.Fatal(err)
	}
	if _, err := base.SetTenantDisabled(ctx, "acme", false); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() (apikey.Key, error){
		"by id":     func() (apikey.Key, error) { return base.KeyByID(ctx, k.ID) },
		"by secret": func() (apikey.Key, error) { return base.GetKey(ctx, k.Hash) },
	} {
		got, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := got.Refusal(time.Now()); code != apikey.CodeDisabled {
			t.Fatalf("the key read %s after the tenant's disable and enable: %+v (refusal %q); want it still disabled", name, got, code)
		}
	}
}

// A tenant disable that listed the keys before a rotation disables the
// key's new secret.
func TestTenantDisableRacingARotation(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	ctx := context.Background()
	k := putTestKey(t, base, "rb-old", "acme")
	s := interleaved(t, base, "TransactWriteItems", func() {
		if err := base.RotateKey(ctx, k, rotated(k, "rb-new"), time.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
	})
	if _, err := s.SetTenantDisabled(ctx, "acme", true); err != nil {
		t.Fatal(err)
	}
	nk, err := base.GetKey(ctx, apikey.Hash("rb-new"))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := nk.Refusal(time.Now()); code != apikey.CodeTenantDisabled {
		t.Fatalf("the new secret of a disabled tenant's key: %+v (refusal %q); want tenant_disabled", nk, code)
	}
}

// A rotation whose write took effect but answered an error (a timeout)
// succeeded: reported as failed, its new secret would never be shown, and
// the key would stop working when the old secret's overlap ends.
func TestRotationThatTookEffectAnsweringAnError(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	ctx := context.Background()
	k := putTestKey(t, base, "rb-old", "acme")
	in := awsfault.New(1).Add(awsfault.Rule{Service: "DynamoDB", Operation: "TransactWriteItems", Kind: awsfault.After, Times: 1})
	s := New(dynamodb.NewFromConfig(emutest.Config(t), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, in.APIOption) }), base.Table)
	next := rotated(k, "rb-new")
	if err := s.RotateKey(ctx, k, next, time.Now().Add(time.Hour)); err != nil {
		got, _ := base.KeyByID(ctx, k.ID)
		t.Fatalf("rotate (took effect, answered an error): %v; the key's secret is now %s…, the new one's %s…", err, got.Hash[:8], next.Hash[:8])
	}
}

// A key made for a disabled tenant while the tenant is enabled again works:
// the enable lists the keys before the key is marked with its tenant, and
// the mark, made on a read of the tenant from before the enable, would
// leave it refused with tenant_disabled for good.
func TestKeyCreatedWhileItsTenantIsEnabled(t *testing.T) {
	t.Parallel()
	base := emulatorStore(t)
	ctx := context.Background()
	if _, err := base.SetTenantDisabled(ctx, "acme", true); err != nil {
		t.Fatal(err)
	}
	// auth.Create writes the key (the first transaction), reads the
	// tenant, then marks the key (the second): the enable runs between.
	s := interleavedAt(t, base, "TransactWriteItems", 2, func() {
		if _, err := base.SetTenantDisabled(ctx, "acme", false); err != nil {
			t.Error(err)
		}
	})
	_, k, err := auth.Create(ctx, s, auth.NewKey{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, read := range []func() (apikey.Key, error){
		func() (apikey.Key, error) { return base.KeyByID(ctx, k.ID) },
		func() (apikey.Key, error) { return base.GetKey(ctx, k.Hash) },
	} {
		got, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := got.Refusal(time.Now()); code != "" {
			t.Fatalf("a key made while its tenant was enabled again: %+v refused %q; want it working", got, code)
		}
	}
}

// A key made while its tenant is disabled is refused with it, however its
// make and the disable interleave (auth.Create): the disable before the
// make's first or second write, or after the make.
func TestKeyCreatedWhileItsTenantIsDisabled(t *testing.T) {
	t.Parallel()
	for nth := 1; nth <= 2; nth++ {
		base := emulatorStore(t)
		ctx := context.Background()
		var disabled sync.Once
		disable := func() {
			if _, err := base.SetTenantDisabled(ctx, "acme", true); err != nil {
				t.Error(err)
			}
		}
		s := interleavedAt(t, base, "TransactWriteItems", nth, func() { disabled.Do(disable) })
		_, k, err := auth.Create(ctx, s, auth.NewKey{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		disabled.Do(disable) // the make wrote once only: the disable came after
		got, err := base.GetKey(ctx, k.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := got.Refusal(time.Now()); code != apikey.CodeTenantDisabled {
			t.Fatalf("disable before write %d of the make: the key %+v refused %q; want tenant_disabled", nth, got, code)
		}
	}
}
