package integrations_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/integrations"
)

var admin = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ada Admin"}

func newTenant(t *testing.T, db *gorm.DB, slug string) tenants.Tenant {
	t.Helper()
	tn, err := tenants.NewStore(db, nil).CreateTenant(context.Background(), admin, slug, slug)
	if err != nil {
		t.Fatalf("create tenant %s: %v", slug, err)
	}
	return tn
}

func TestCheckURL(t *testing.T) {
	strict := integrations.NewStore(nil, integrations.Config{})
	loose := integrations.NewStore(nil, integrations.Config{AllowPrivate: true})
	tests := []struct {
		url          string
		strict, test bool // accepted
	}{
		{"https://hooks.example.com/stockade", true, true},
		{"https://93.184.216.34/x", true, true},
		{"http://hooks.example.com/stockade", false, true},
		{"https://user:pw@hooks.example.com/", false, false},
		{"https://127.0.0.1:8443/", false, true},
		{"https://10.1.2.3/", false, true},
		{"https://169.254.169.254/latest/meta-data", false, true},
		{"https://[::1]/", false, true},
		{"https://[fd00::1]/", false, true},
		// A zone is refused on any literal, and every range of the shared
		// blocklist applies (tenants/netguard).
		{"https://[::1%25lo]/", false, true},
		{"https://[fe80::1%25eth0]/", false, true},
		{"https://[2606:2800:220:1::1%25eth0]/", false, true},
		{"https://[::ffff:127.0.0.1]/", false, true},
		{"https://[::127.0.0.1]/", false, true},
		{"https://[64:ff9b::7f00:1]/", false, true},
		{"https://[2002:7f00:1::1]/", false, true},
		{"https://[fec0::1]/", false, true},
		{"https://0.1.2.3/", false, true},
		{"https://192.0.2.10/", false, true},
		{"https://198.51.100.10/", false, true},
		{"https://203.0.113.10/", false, true},
		{"https://localhost/", false, true},
		{"https://metadata.google.internal/", false, true},
		{"https://intranet/", false, true},
		{"ftp://hooks.example.com/", false, false},
		{"hooks.example.com/x", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			if err := strict.CheckURL(tt.url); (err == nil) != tt.strict {
				t.Errorf("Got(CheckURL(%q)) = %v; want accepted=%t", tt.url, err, tt.strict)
			} else if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Got(CheckURL(%q)) = %v; want errdefs.ErrInvalid", tt.url, err)
			}
			if err := loose.CheckURL(tt.url); (err == nil) != tt.test {
				t.Errorf("Got(CheckURL(%q), test allowance) = %v; want accepted=%t", tt.url, err, tt.test)
			}
		})
	}
}

func TestStore(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s := integrations.NewStore(d.DB, integrations.Config{AllowPrivate: true})
			a, b := newTenant(t, d.DB, "hooks-a"), newTenant(t, d.DB, "hooks-b")

			invalid := []struct {
				name string
				ne   integrations.NewEndpoint
			}{
				{"bad url", integrations.NewEndpoint{URL: "nope", SecretName: "HOOK"}},
				{"bad secret name", integrations.NewEndpoint{URL: "https://h.example.com/", SecretName: "lower"}},
				{"unknown event", integrations.NewEndpoint{URL: "https://h.example.com/", SecretName: "HOOK", EventTypes: []string{"sandbox.exploded"}}},
			}
			for _, tt := range invalid {
				if _, err := s.Create(ctx, admin, a.ID, tt.ne); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Got(Create %s) = %v; want errdefs.ErrInvalid", tt.name, err)
				}
			}

			ep, err := s.Create(ctx, admin, a.ID, integrations.NewEndpoint{URL: " https://h.example.com/in ", SecretName: "HOOK",
				EventTypes: []string{integrations.EventSandboxDestroyed, integrations.EventSandboxCreated, integrations.EventSandboxCreated}})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if got := ep.EventTypes(); len(got) != 2 || got[0] != integrations.EventSandboxCreated || got[1] != integrations.EventSandboxDestroyed {
				t.Errorf("Got(EventTypes) = %v; want [sandbox.created sandbox.destroyed]", got)
			}
			if ep.URL != "https://h.example.com/in" || !ep.Enabled {
				t.Errorf("Got(endpoint) = %+v; want trimmed URL, enabled", ep)
			}
			if ep.Wants(integrations.EventRunCompleted) {
				t.Errorf("Got(Wants(run.completed)) = true; want false")
			}

			// Tenant isolation: every method x other tenant -> not found.
			isolation := []struct {
				name string
				call func(tenantID string) error
			}{
				{"Endpoint", func(tid string) error { _, err := s.Endpoint(ctx, tid, ep.ID); return err }},
				{"SetEnabled", func(tid string) error { _, err := s.SetEnabled(ctx, admin, tid, ep.ID, true); return err }},
				{"SendTest", func(tid string) error { _, err := s.SendTest(ctx, admin, tid, ep.ID); return err }},
				{"Delete", func(tid string) error { return s.Delete(ctx, admin, tid, ep.ID) }},
			}
			for _, tt := range isolation {
				if err := tt.call(b.ID); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Got(%s from another tenant) = %v; want errdefs.ErrNotFound", tt.name, err)
				}
			}
			if list, err := s.Endpoints(ctx, b.ID); err != nil || len(list) != 0 {
				t.Errorf("Got(Endpoints of other tenant) = %v, %v; want none", list, err)
			}
			if list, err := s.Endpoints(ctx, a.ID); err != nil || len(list) != 1 {
				t.Errorf("Got(Endpoints) = %v, %v; want 1", list, err)
			}

			off, err := s.SetEnabled(ctx, admin, a.ID, ep.ID, false)
			if err != nil || off.Enabled {
				t.Fatalf("Got(SetEnabled false) = %+v, %v; want disabled", off, err)
			}
			d1, err := s.SendTest(ctx, admin, a.ID, ep.ID)
			if err != nil || d1.State != integrations.DeliveryPending || d1.EventType != integrations.EventTest {
				t.Fatalf("Got(SendTest) = %+v, %v; want a pending webhook.test delivery", d1, err)
			}
			if list, err := s.Deliveries(ctx, b.ID, "", 10); err != nil || len(list) != 0 {
				t.Errorf("Got(Deliveries of other tenant) = %v, %v; want none", list, err)
			}
			if list, err := s.Deliveries(ctx, a.ID, ep.ID, 10); err != nil || len(list) != 1 || list[0].ID != d1.ID {
				t.Errorf("Got(Deliveries) = %v, %v; want [%s]", list, err, d1.ID)
			}
			if err := s.Delete(ctx, admin, a.ID, ep.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := s.Endpoint(ctx, a.ID, ep.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(Endpoint after Delete) = %v; want errdefs.ErrNotFound", err)
			}

			// Audited, each in its tenant's log.
			var types []string
			if err := d.DB.Model(&audit.Event{}).Where("tenant_id = ? AND target_kind = ?", a.ID, "webhook_endpoint").
				Order("occurred_at, id").Pluck("type", &types).Error; err != nil {
				t.Fatal(err)
			}
			want := []string{audit.TypeWebhookCreated, audit.TypeWebhookUpdated, audit.TypeWebhookTested, audit.TypeWebhookDeleted}
			if len(types) != len(want) {
				t.Fatalf("Got(audit types) = %v; want %v", types, want)
			}
			for i := range want {
				if types[i] != want[i] {
					t.Errorf("Got(audit types) = %v; want %v", types, want)
					break
				}
			}
		})
	}
}

// TestOutboxInTransaction: an event exists exactly when the transaction of
// its change commits.
func TestOutboxInTransaction(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			s := integrations.NewStore(d.DB, integrations.Config{})
			tn := newTenant(t, d.DB, "outbox")
			boom := errors.New("boom")
			for _, tt := range []struct {
				name    string
				fail    bool
				wantRow int64
			}{{"rolled back", true, 0}, {"committed", false, 1}} {
				t.Run(tt.name, func(t *testing.T) {
					err := d.DB.Transaction(func(tx *gorm.DB) error {
						if err := s.Add(tx, tn.ID, integrations.EventSandboxCreated, map[string]any{"sandbox_id": tt.name}); err != nil {
							return err
						}
						if tt.fail {
							return boom
						}
						return nil
					})
					if tt.fail != errors.Is(err, boom) {
						t.Fatalf("Got(transaction) = %v; want fail=%t", err, tt.fail)
					}
					var n int64
					d.DB.Model(&integrations.Event{}).Where("tenant_id = ? AND payload LIKE ?", tn.ID, "%"+tt.name+"%").Count(&n)
					if n != tt.wantRow {
						t.Errorf("Got(outbox rows) = %d; want %d", n, tt.wantRow)
					}
				})
			}
			if err := s.Add(d.DB, tn.ID, integrations.EventSandboxCreated, []int{1}); err == nil {
				t.Errorf("Got(Add with a non-object) = %v; want an error", err)
			}
		})
	}
}

// TestEnabledBound: a tenant has at most 20 enabled endpoints; creating or
// enabling one more is a conflict, disabled ones do not count.
func TestEnabledBound(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s := integrations.NewStore(d.DB, integrations.Config{})
			tn := newTenant(t, d.DB, "bound")
			create := func() (integrations.Endpoint, error) {
				return s.Create(ctx, admin, tn.ID, integrations.NewEndpoint{URL: "https://h.example.com/", SecretName: "HOOK"})
			}
			var first integrations.Endpoint
			for i := range 20 {
				ep, err := create()
				if err != nil {
					t.Fatalf("Create #%d: %v", i+1, err)
				}
				if i == 0 {
					first = ep
				}
			}
			if _, err := create(); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(Create #21) = %v; want errdefs.ErrConflict", err)
			}
			if _, err := s.SetEnabled(ctx, admin, tn.ID, first.ID, false); err != nil {
				t.Fatal(err)
			}
			if _, err := create(); err != nil {
				t.Errorf("Got(Create after disabling one) = %v; want nil", err)
			}
			if _, err := s.SetEnabled(ctx, admin, tn.ID, first.ID, true); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("Got(enable #21) = %v; want errdefs.ErrConflict", err)
			}
		})
	}
}

// TestPrune: old delivered or failed deliveries go, then the fanned-out
// events nothing refers to; a pending delivery and its event stay however
// old, and so does anything newer than the cutoff.
func TestPrune(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			s := integrations.NewStore(d.DB, integrations.Config{})
			tn := newTenant(t, d.DB, "prune")
			old, recent := time.Now().Add(-40*24*time.Hour).UTC(), time.Now().UTC()
			event := func(name string, fanned time.Time) string {
				t.Helper()
				if err := s.Add(d.DB, tn.ID, integrations.EventSandboxCreated, map[string]any{"sandbox_id": name}); err != nil {
					t.Fatal(err)
				}
				var ev integrations.Event
				if err := d.DB.Where("payload LIKE ?", "%"+name+"%").Take(&ev).Error; err != nil {
					t.Fatal(err)
				}
				if err := d.DB.Model(&ev).Update("fanned_out_at", fanned).Error; err != nil {
					t.Fatal(err)
				}
				return ev.ID
			}
			delivery := func(eventID, state string, at time.Time) {
				t.Helper()
				dl := integrations.Delivery{ID: eventID + "-" + state, TenantID: tn.ID, EndpointID: "ep", EventID: eventID,
					EventType: integrations.EventSandboxCreated, State: state, CreatedAt: at, UpdatedAt: at}
				if err := d.DB.Create(&dl).Error; err != nil {
					t.Fatal(err)
				}
			}
			delivered := event("old-delivered", old)
			delivery(delivered, integrations.DeliveryDelivered, old)
			pending := event("old-pending", old)
			delivery(pending, integrations.DeliveryPending, old)
			noEndpoint := event("old-no-endpoint", old)
			fresh := event("recent", recent)
			delivery(fresh, integrations.DeliveryFailed, recent)

			evs, dls, err := s.Prune(ctx, time.Now().Add(-30*24*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if evs != 2 || dls != 1 {
				t.Errorf("Got(Prune) = %d events, %d deliveries; want 2 (old-delivered, old-no-endpoint), 1", evs, dls)
			}
			for id, want := range map[string]int64{delivered: 0, noEndpoint: 0, pending: 1, fresh: 1} {
				var n int64
				d.DB.Model(&integrations.Event{}).Where("id = ?", id).Count(&n)
				if n != want {
					t.Errorf("Got(event %s rows after Prune) = %d; want %d", id, n, want)
				}
			}
		})
	}
}
