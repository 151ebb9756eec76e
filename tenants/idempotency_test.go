package tenants_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func TestIdempotencyKeys(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a, b := e.tenant(t, "idem-a"), e.tenant(t, "idem-b")
		req := tenants.IdemRequest{TenantID: a.ID, Principal: "tok-1", Route: "POST /api/v1/sandboxes", Key: "k-1",
			RequestHash: "h-1", Owner: "server-1"}

		k, begun, err := e.store.BeginIdempotent(ctx, req)
		if err != nil || !begun || k.State != tenants.IdemPending {
			t.Fatalf("Got(BeginIdempotent of a new key) = %+v, %v, %v; want begun, pending", k, begun, err)
		}
		if !k.ExpiresAt.Equal(k.CreatedAt.Add(24 * time.Hour)) {
			t.Errorf("Got(expires_at) = %v; want created_at + 24 h", k.ExpiresAt)
		}
		// A retry while the first runs in this server: conflict.
		if _, _, err := e.store.BeginIdempotent(ctx, req); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("Got(BeginIdempotent while in flight) err = %v; want errdefs.ErrConflict", err)
		}
		// The same key for another request: refused, naming the header.
		other := req
		other.RequestHash = "h-2"
		_, _, err = e.store.BeginIdempotent(ctx, other)
		wantField(t, err, tenants.IdempotencyField, "reused")

		// Another tenant, or another caller, has keys of its own.
		for _, r := range []tenants.IdemRequest{
			{TenantID: b.ID, Principal: "tok-1", Route: req.Route, Key: req.Key, RequestHash: "h-9", Owner: "server-1"},
			{TenantID: a.ID, Principal: "tok-2", Route: req.Route, Key: req.Key, RequestHash: "h-9", Owner: "server-1"},
			{TenantID: a.ID, Principal: "tok-1", Route: "POST /api/v1/vms", Key: req.Key, RequestHash: "h-9", Owner: "server-1"},
		} {
			if _, begun, err := e.store.BeginIdempotent(ctx, r); err != nil || !begun {
				t.Errorf("Got(BeginIdempotent %+v) = %v, %v; want a key of its own", r, begun, err)
			}
		}

		if err := e.store.CompleteIdempotent(ctx, k.ID, 201, "/api/v1/sandboxes/sb-1", `{"id":"sb-1"}`, false); err != nil {
			t.Fatal(err)
		}
		got, begun, err := e.store.BeginIdempotent(ctx, req)
		if err != nil || begun || got.State != tenants.IdemDone || got.StatusCode != 201 || got.ResponseBody != `{"id":"sb-1"}` ||
			got.Location != "/api/v1/sandboxes/sb-1" || got.CompletedAt == nil {
			t.Fatalf("Got(BeginIdempotent of a done key) = %+v, %v, %v; want its stored answer", got, begun, err)
		}

		// A failed request frees its key: the retry runs again.
		failed := req
		failed.Key = "k-failed"
		fk, _, err := e.store.BeginIdempotent(ctx, failed)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.AbandonIdempotent(ctx, fk.ID); err != nil {
			t.Fatal(err)
		}
		if _, begun, err := e.store.BeginIdempotent(ctx, failed); err != nil || !begun {
			t.Errorf("Got(BeginIdempotent after an abandoned try) = %v, %v; want begun again", begun, err)
		}

		// Pending in a server that stopped: handed to the new one, once.
		crashed := req
		crashed.Key, crashed.Owner = "k-crashed", "server-dead"
		if _, _, err := e.store.BeginIdempotent(ctx, crashed); err != nil {
			t.Fatal(err)
		}
		retry := crashed
		retry.Owner = "server-2"
		stale, begun, err := e.store.BeginIdempotent(ctx, retry)
		if err != nil || begun || stale.State != tenants.IdemPending || stale.Owner != "server-dead" {
			t.Fatalf("Got(BeginIdempotent of a key a stopped server left) = %+v, %v, %v; want it pending, owned by the dead server", stale, begun, err)
		}
		if ok, err := e.store.TakeOverIdempotent(ctx, stale, "server-2"); err != nil || !ok {
			t.Fatalf("Got(TakeOverIdempotent) = %v, %v; want true", ok, err)
		}
		if ok, err := e.store.TakeOverIdempotent(ctx, stale, "server-3"); err != nil || ok {
			t.Errorf("Got(second TakeOverIdempotent) = %v, %v; want false", ok, err)
		}

		// Expiry: after 24 h the key is forgotten and pruned.
		e.clock.Advance(24*time.Hour + time.Second)
		if k2, begun, err := e.store.BeginIdempotent(ctx, other); err != nil || !begun || k2.ID == k.ID {
			t.Errorf("Got(BeginIdempotent of an expired key, another body) = %v, %v; want a fresh key", begun, err)
		}
		n, err := e.store.DeleteExpiredIdempotencyKeys(ctx)
		if err != nil || n != 5 {
			t.Errorf("Got(DeleteExpiredIdempotencyKeys) = %d, %v; want 5 (all but the fresh one)", n, err)
		}
		var left int64
		if err := e.db.Table("idempotency_keys").Count(&left).Error; err != nil || left != 1 {
			t.Errorf("Got(keys left) = %d, %v; want 1", left, err)
		}
	})
}
