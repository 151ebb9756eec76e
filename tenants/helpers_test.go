package tenants_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// newClock is the injected clock tests move by hand; it drives timers too.
func newClock() *clockwork.FakeClock {
	return clockwork.NewFakeClockAt(time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC))
}

// env is one database under test with a store on an injected clock.
type env struct {
	name  string
	db    *gorm.DB
	store *tenants.Store
	log   *audit.Log
	clock *clockwork.FakeClock
}

// eachDB runs fn on every test database (SQLite, and PostgreSQL when
// configured), each fresh.
func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			c := newClock()
			fn(t, &env{name: d.Name, db: d.DB, store: tenants.NewStore(d.DB, c.Now), log: audit.NewLog(d.DB, c.Now), clock: c})
		})
	}
}

var ctx = context.Background()

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u-admin", Name: "Ada Admin", RemoteAddr: "192.0.2.1", RequestID: "req-1"}

func (e *env) tenant(t *testing.T, slug string) tenants.Tenant {
	t.Helper()
	tn, err := e.store.CreateTenant(ctx, admin, slug, "")
	if err != nil {
		t.Fatalf("CreateTenant(%q) = %v", slug, err)
	}
	return tn
}

func (e *env) login(t *testing.T, subject, email string) tenants.User {
	t.Helper()
	u, err := e.store.UpsertUserAtLogin(ctx, tenants.Identity{Issuer: "https://idp.example", Subject: subject, Email: email, Name: subject})
	if err != nil {
		t.Fatalf("UpsertUserAtLogin(%s) = %v", subject, err)
	}
	return u
}

// member makes an active member of the tenant with role.
func (e *env) member(t *testing.T, tn tenants.Tenant, subject string, role tenants.Role) (tenants.User, tenants.Membership) {
	t.Helper()
	email := subject + "@example.com"
	u := e.login(t, subject, email)
	m, err := e.store.InviteMember(ctx, admin, tn.ID, email, role)
	if err != nil {
		t.Fatalf("InviteMember(%s) = %v", email, err)
	}
	if !m.Active() {
		t.Fatalf("InviteMember(%s) of an existing user: Active() = false; want true", email)
	}
	return u, m
}

// adminOf returns an actor for an active admin of the tenant (made on
// first use): tokens are made by members.
func (e *env) adminOf(t *testing.T, tn tenants.Tenant) audit.Actor {
	t.Helper()
	email := "token-admin@" + tn.Slug + ".example.com"
	u := e.login(t, "token-admin-"+tn.Slug, email)
	if _, err := e.store.RoleOf(ctx, tn.ID, u.ID); errors.Is(err, errdefs.ErrNotFound) {
		if _, err := e.store.InviteMember(ctx, admin, tn.ID, email, tenants.RoleAdmin); err != nil {
			t.Fatalf("InviteMember(%s) = %v", email, err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return audit.Actor{Kind: audit.ActorUser, ID: u.ID, Name: email, RemoteAddr: "192.0.2.1", RequestID: "req-2"}
}

// events returns the tenant's audit events of one type.
func (e *env) events(t *testing.T, tenantID, typ string) []audit.Event {
	t.Helper()
	evs, err := e.log.List(ctx, tenantID, audit.Filter{Type: typ, Limit: audit.MaxLimit})
	if err != nil {
		t.Fatalf("List audit = %v", err)
	}
	return evs
}

// wantField checks err is a *errdefs.FieldError of field and rule wrapping errdefs.ErrInvalid.
func wantField(t *testing.T, err error, field, rule string) {
	t.Helper()
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Got error %v; want *errdefs.FieldError %s/%s", err, field, rule)
	}
	if fe.Field != field || fe.Rule != rule {
		t.Errorf("Got errdefs.FieldError(%s, %s); want (%s, %s)", fe.Field, fe.Rule, field, rule)
	}
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("errors.Is(%v, errdefs.ErrInvalid) = false; want true", err)
	}
}

// unchanged fails when any table's row count differs from before.
func unchanged(t *testing.T, db *gorm.DB, before map[string]int64) {
	t.Helper()
	if ok, diff := dbtest.Equal(before, dbtest.Count(t, db)); !ok {
		t.Errorf("rejected call wrote rows: %s", diff)
	}
}
