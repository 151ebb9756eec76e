package tenants_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

var operator = audit.Actor{Kind: audit.ActorUser, ID: "op1", Name: "op@platform.test", RemoteAddr: "192.0.2.9", RequestID: "r9"}

// TestFreezeTenant: a freeze is recorded with its time, reason and who,
// audited in the same transaction, refused twice, lifted once, and only
// ever touches its own tenant.
func TestFreezeTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme, err := e.store.CreateTenant(ctx, admin, "acme", "")
		if err != nil {
			t.Fatal(err)
		}
		other, err := e.store.CreateTenant(ctx, admin, "other", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.CheckNotFrozen(ctx, acme.ID); err != nil {
			t.Fatalf("Got(CheckNotFrozen before) = %v; want nil", err)
		}
		f, err := e.store.FreezeTenant(ctx, operator, acme.ID, "  agent exfiltrating  ")
		if err != nil {
			t.Fatalf("FreezeTenant = %v", err)
		}
		now := e.clock.Now().Truncate(time.Microsecond)
		if !f.Since.Equal(now) || f.Reason != "agent exfiltrating" || f.By != operator.Name {
			t.Errorf("Got(FreezeTenant) = %+v; want since now, the trimmed reason, by %s", f, operator.Name)
		}
		got, frozen, err := e.store.TenantFreeze(ctx, acme.ID)
		if err != nil || !frozen || !got.Since.Equal(now) || got.Reason != f.Reason || got.Since.Location() != time.UTC {
			t.Errorf("Got(TenantFreeze) = %+v, %v, %v; want the freeze in UTC", got, frozen, err)
		}
		err = e.store.CheckNotFrozen(ctx, acme.ID)
		var fe *tenants.FrozenError
		if !errors.As(err, &fe) || !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "agent exfiltrating") {
			t.Errorf("Got(CheckNotFrozen) = %v; want a FrozenError (conflict) naming the reason", err)
		}
		if err := e.store.CheckNotFrozen(ctx, other.ID); err != nil {
			t.Errorf("Got(CheckNotFrozen of the other tenant) = %v; want nil", err)
		}
		all, err := e.store.FrozenTenants(ctx)
		if _, ok := all[acme.ID]; err != nil || len(all) != 1 || !ok {
			t.Errorf("Got(FrozenTenants) = %v, %v; want only acme", all, err)
		}
		evs := e.events(t, acme.ID, audit.TypeTenantFrozen)
		if len(evs) != 1 || evs[0].Code != "ST2003W" || evs[0].ActorID != operator.ID || evs[0].Details["reason"] != "agent exfiltrating" ||
			evs[0].Outcome != audit.OutcomeSuccess {
			t.Errorf("Got(tenant.frozen events) = %+v; want one by the operator with the reason", evs)
		}

		tests := []struct {
			name string
			err  error
			want error
		}{
			{"freeze again", func() error { _, err := e.store.FreezeTenant(ctx, operator, acme.ID, ""); return err }(), errdefs.ErrConflict},
			{"unknown tenant", func() error { _, err := e.store.FreezeTenant(ctx, operator, "no-such-tenant", ""); return err }(), errdefs.ErrNotFound},
			{"reason too long", func() error {
				_, err := e.store.FreezeTenant(ctx, operator, other.ID, strings.Repeat("x", 501))
				return err
			}(), errdefs.ErrInvalid},
			{"unfreeze a tenant not frozen", e.store.UnfreezeTenant(ctx, operator, other.ID), errdefs.ErrConflict},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if !errors.Is(tc.err, tc.want) {
					t.Errorf("Got(%s) = %v; want %v", tc.name, tc.err, tc.want)
				}
			})
		}
		if _, frozen, _ := e.store.TenantFreeze(ctx, other.ID); frozen {
			t.Error("Got(other tenant frozen) = true; want a failed freeze to change nothing")
		}

		e.clock.Advance(time.Hour)
		if err := e.store.UnfreezeTenant(ctx, operator, acme.ID); err != nil {
			t.Fatalf("UnfreezeTenant = %v", err)
		}
		if err := e.store.CheckNotFrozen(ctx, acme.ID); err != nil {
			t.Errorf("Got(CheckNotFrozen after unfreeze) = %v; want nil", err)
		}
		if evs := e.events(t, acme.ID, audit.TypeTenantUnfrozen); len(evs) != 1 || evs[0].Details["reason"] != "agent exfiltrating" {
			t.Errorf("Got(tenant.unfrozen events) = %+v; want one naming the freeze it lifted", evs)
		}
		if _, err := e.store.FreezeTenant(ctx, operator, acme.ID, ""); err != nil {
			t.Errorf("Got(freeze again after unfreeze) = %v; want nil", err)
		}
	})
}
