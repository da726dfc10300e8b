package localstack

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaybatch/relay/internal/apikey"
	"github.com/relaybatch/relay/internal/app"
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/local/localrun"
)

// Keys that expire, rotate and belong to a disabled tenant (docs/api.md
// "Keys"), as the API and the engine see them.

// errorCode is the error code of an API answer.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	return e.Error.Code
}

// A key past its expiry is refused at the API (401 api_key_expired) and
// stops its running batch: chunks started once the checker's cached key
// read is older than 30 s on its clock end api_key_expired and never reach
// the mock. (The shared runtime's 10-row chunks give the batch several
// chunk starts; the expiry is written to the key's record, as the time
// passing it would make it.)
func TestExpiredKeyIsRefusedAndStopsItsBatch(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	rt := runtime(t, func(o *localrun.Options) {
		o.Wire = func(a *app.App) { a.Govern.Now = func() time.Time { return time.Unix(0, clock.Load()) } }
	})
	ctx := context.Background()
	raw, k, err := auth.Create(ctx, rt.App.Store, auth.NewKey{Tenant: "acme", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	submitter := clientWithKey(rt, raw)
	reader, _ := client(t, rt, "acme")
	rows := nRows(60, "[[mock:sleep=300ms]] slow")
	b := createBatch(t, submitter, upload(t, submitter, "slow.jsonl", jsonlRows(rows)).ID)
	waitCompleted(t, reader, b.ID, 10)
	k.ExpiresAt = time.Now().Add(-time.Second).Unix()
	if err := rt.App.Store.PutKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if status, body := rawDo(t, rt, raw, "GET", "/v1/batches/"+b.ID, nil); status != 401 || errorCode(body) != apikey.CodeExpired {
		t.Fatalf("the expired key: %d %s, want 401 api_key_expired", status, body)
	}
	clock.Add(int64(31 * time.Second))
	checkStoppedPartWay(t, rt, reader, b.ID, rows, apikey.CodeExpired)
}

// A rotated key keeps its id and its batches: during the overlap both of
// its secrets work, after it only the new one (401 api_key_expired for the
// old).
func TestRotatedKeyOverlap(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	c, old := client(t, rt, "acme")
	f := upload(t, c, "in.jsonl", jsonlRows(nRows(2, "rotate")))
	id := apikey.Hash(old)[:12]
	overlapping, k, err := auth.Rotate(ctx, rt.App.Store, id, time.Hour, time.Now())
	if err != nil || k.ID != id {
		t.Fatalf("rotate: %+v, %v", k, err)
	}
	for _, secret := range []string{old, overlapping} {
		if status, body := rawDo(t, rt, secret, "GET", "/v1/files/"+f.ID, nil); status != 200 {
			t.Fatalf("during the overlap: %d %s, want both secrets to work", status, body)
		}
	}
	// Rotated again with no overlap: the secret it replaced stops at once,
	// and so does the one before, whose overlap the new rotation ends.
	fresh, _, err := auth.Rotate(ctx, rt.App.Store, id, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]int{old: 401, overlapping: 401, fresh: 200} {
		status, body := rawDo(t, rt, secret, "GET", "/v1/files/"+f.ID, nil)
		if status != want || (want == 401 && errorCode(body) != apikey.CodeExpired) {
			t.Fatalf("after the overlap, secret %s…: %d %s, want %d", secret[:6], status, body, want)
		}
	}
	b := waitBatch(t, clientWithKey(rt, fresh), createBatch(t, clientWithKey(rt, fresh), f.ID).ID)
	if got, _ := rt.App.Store.GetBatch(ctx, "acme", b.ID); b.Status != "completed" || got.KeyID != id {
		t.Fatalf("a batch of the new secret: %s, key %s; want completed under key %s", b.Status, got.KeyID, id)
	}
}

// A disabled tenant's keys are refused (403 tenant_disabled), a key made
// for it afterwards too, and its template's next firing runs nothing and
// cancels it with tenant_disabled; enabled again, its keys work.
func TestDisabledTenantStopsKeysAndTemplates(t *testing.T) {
	t.Parallel()
	rt := runtime(t)
	ctx := context.Background()
	_, key := client(t, rt, "acme")
	_, other := client(t, rt, "globex")
	tpl := inlineTemplate(t, rt, key, "0 6 * * *")
	if n, err := rt.App.Store.SetTenantDisabled(ctx, "acme", true); err != nil || n != 1 {
		t.Fatalf("disable: %d keys, %v; want the tenant's one key", n, err)
	}
	later, _, err := auth.Create(ctx, rt.App.Store, auth.NewKey{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, later} {
		if status, body := rawDo(t, rt, k, "GET", "/v1/batches", nil); status != 403 || errorCode(body) != apikey.CodeTenantDisabled {
			t.Fatalf("a key of the disabled tenant: %d %s, want 403 tenant_disabled", status, body)
		}
	}
	if status, _ := rawDo(t, rt, other, "GET", "/v1/batches", nil); status != 200 {
		t.Fatalf("another tenant's key: %d", status)
	}
	at := time.Date(2030, 1, 7, 6, 0, 0, 0, time.UTC)
	if err := rt.App.Batches.Fire(ctx, firing("acme", tpl.ID, at)); err != nil {
		t.Fatalf("firing: %v", err)
	}
	got, err := rt.App.Store.GetBatch(ctx, "acme", tpl.ID)
	if err != nil || got.Status != "cancelled" || len(got.ErrorList) != 1 || got.ErrorList[0].Code != apikey.CodeTenantDisabled ||
		!strings.Contains(got.ErrorList[0].Message, "disabled") {
		t.Fatalf("template after a firing of a disabled tenant: %+v, %v; want cancelled with tenant_disabled", got, err)
	}
	if runs, _, _ := rt.App.Store.ListBatches(ctx, "acme", "", 10, tpl.ID); len(runs) != 0 {
		t.Fatalf("runs of the template: %d, want none", len(runs))
	}
	if _, err := rt.App.Store.SetTenantDisabled(ctx, "acme", false); err != nil {
		t.Fatal(err)
	}
	if status, body := rawDo(t, rt, later, "GET", "/v1/batches", nil); status != 200 {
		t.Fatalf("enabled again: %d %s", status, body)
	}
}
