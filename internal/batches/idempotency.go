package batches

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/batch"
	"github.com/relaybatch/relay/internal/errs"
	"github.com/relaybatch/relay/internal/store"
)

// An Idempotency-Key (docs/api.md "Overview") is scoped to its tenant (its
// item lives under the tenant's key), to the route it was sent to and
// bound to the body sent with it: the store keys it by a hash of the route
// and the header, and keeps a hash of the body next to the batch it made.
// A create checks it before it writes anything (Repeat), so a repeat
// stores no second input file; the store checks it again when it records
// the batch, for two requests racing with one key.

// NewIdemKey scopes an Idempotency-Key header to route, the method and
// path it was sent to ("POST /v1/batches/batch_x/retry" differs from
// another batch's retry), and binds it to body. No header is no key.
func NewIdemKey(route, header string, body []byte) store.IdemKey {
	if header == "" {
		return store.IdemKey{}
	}
	sum := sha256.Sum256(body)
	return store.IdemKey{Key: apikey.Hash(route + "\x00" + header), Body: hex.EncodeToString(sum[:])}
}

// errKeyReused is the answer to a key sent again with another body: a 422,
// as the IETF Idempotency-Key draft says (the official SDKs retry a 409,
// which would only get the same answer again).
func errKeyReused() error {
	return errs.E(errs.Unprocessable, "idempotency_key_reused", "",
		"this Idempotency-Key was already used with another request body: send a new key for a new request")
}

// Repeat returns the batch that k made the first time, and true, when k was
// used before; nil and false when it was not (or there is no key). A key
// used with another body gets errKeyReused.
func (s *Service) Repeat(ctx context.Context, tenant string, k store.IdemKey) (batch.Batch, bool, error) {
	if k.Key == "" {
		return batch.Batch{}, false, nil
	}
	first, err := s.Store.IdempotentBatch(ctx, tenant, k.Key)
	if err != nil || first.BatchID == "" {
		return batch.Batch{}, false, err
	}
	if first.Body != k.Body {
		return batch.Batch{}, false, errKeyReused()
	}
	b, err := s.Store.GetBatch(ctx, tenant, first.BatchID)
	if err != nil {
		return batch.Batch{}, false, err
	}
	return b.Out(), true, nil
}

// keyReused turns the store's ErrIdemKeyReused into the client's error.
func keyReused(err error) error {
	if errors.Is(err, store.ErrIdemKeyReused) {
		return errKeyReused()
	}
	return err
}
