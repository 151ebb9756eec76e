package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

func TestNormalizeInject(t *testing.T) {
	tests := []struct {
		in   []string
		want string // comma-joined, or "error"
	}{
		{nil, "authorization"},
		{[]string{}, "authorization"},
		{[]string{"Authorization"}, "authorization"},
		{[]string{" header:x-api-key ", "BODY", "query", "path", "body"}, "header:X-Api-Key,body,query,path"},
		{[]string{"header:authorization"}, "authorization"},
		{[]string{"header:PRIVATE-TOKEN", "authorization"}, "header:Private-Token,authorization"},
		{[]string{"headers"}, "error"},
		{[]string{"header:"}, "error"},
		{[]string{"header:X Api"}, "error"},
		{[]string{"header:Host"}, "error"},
		{[]string{"header:content-length"}, "error"},
		{[]string{"cookie"}, "error"},
	}
	for _, tt := range tests {
		got, err := secrets.NormalizeInject(tt.in)
		if tt.want == "error" {
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "inject" || !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Got(NormalizeInject(%q)) = %v, %v; want a FieldError on inject", tt.in, got, err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tt.want {
			t.Errorf("Got(NormalizeInject(%q)) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestInjectStored: the locations are stored and listed, a bad one is a
// clear error that writes nothing, Credentials gives them for the scoped
// host only, SetInject changes them (audited) in its own tenant only, and
// a row written before the column existed gets the default.
func TestInjectStored(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			before := dbtest.Count(t, e.db)
			_, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "BAD", Value: "v", Hosts: []string{"a.example.com"}, Inject: []string{"everywhere"}})
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "inject" {
				t.Fatalf("Got(Create bad inject) err = %v; want a FieldError on inject", err)
			}
			if after := dbtest.Count(t, e.db); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("Got(rows) = %v; want unchanged %v", after, before)
			}

			def, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "GH_TOKEN", Value: theValue, Hosts: []string{"api.github.com"}})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"authorization"}; !slices.Equal(def.Inject, want) {
				t.Errorf("Got(Create default).Inject = %v; want %v", def.Inject, want)
			}
			wide, err := e.s.Create(ctx, admin, e.t1, secrets.NewSecret{Name: "API_KEY", Value: "key-value-123456", Hosts: []string{"*.example.com"},
				Inject: []string{"header:x-api-key", "body"}})
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"header:X-Api-Key", "body"}; !slices.Equal(wide.Inject, want) {
				t.Errorf("Got(Create wide).Inject = %v; want %v", wide.Inject, want)
			}
			got, err := e.s.Get(ctx, e.t1, "API_KEY")
			if err != nil || !slices.Equal(got.Inject, wide.Inject) {
				t.Errorf("Got(Get).Inject = %v, %v; want %v", got.Inject, err, wide.Inject)
			}

			creds, ok, err := e.s.Credentials(ctx, e.t1, "sb1", "api.example.com:443")
			if err != nil || !ok || len(creds) != 2 {
				t.Fatalf("Got(Credentials) = %+v, %v, %v; want both secrets, ok", creds, ok, err)
			}
			for _, c := range creds {
				switch c.Name {
				case "API_KEY":
					if c.Value != "key-value-123456" || !slices.Equal(c.Inject, wide.Inject) || c.Placeholder != e.s.Placeholder(e.t1, "sb1", "API_KEY") {
						t.Errorf("Got(Credentials API_KEY) = %+v; want its value, placeholder and locations", c)
					}
				case "GH_TOKEN":
					// Not scoped here: known for scrubbing only.
					if c.Value != theValue || c.Inject != nil {
						t.Errorf("Got(Credentials GH_TOKEN on api.example.com).Inject = %v; want nil (scrub only)", c.Inject)
					}
				}
			}
			if _, ok, err := e.s.Credentials(ctx, e.t1, "sb1", "evil.com"); ok || err != nil {
				t.Errorf("Got(Credentials evil.com) ok = %v, %v; want false", ok, err)
			}
			if _, ok, err := e.s.Credentials(ctx, e.t2, "sb1", "api.example.com"); ok || err != nil {
				t.Errorf("Got(Credentials other tenant) ok = %v, %v; want false", ok, err)
			}

			if _, err := e.s.SetInject(ctx, admin, e.t2, "API_KEY", []string{"query"}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(SetInject other tenant) err = %v; want ErrNotFound", err)
			}
			if _, err := e.s.SetInject(ctx, admin, e.t1, "API_KEY", []string{"nowhere"}); !errors.As(err, &fe) || fe.Field != "inject" {
				t.Errorf("Got(SetInject bad) err = %v; want a FieldError on inject", err)
			}
			upd, err := e.s.SetInject(ctx, admin, e.t1, "API_KEY", []string{"query", "authorization"})
			if err != nil || !slices.Equal(upd.Inject, []string{"query", "authorization"}) {
				t.Errorf("Got(SetInject) = %v, %v; want [query authorization]", upd.Inject, err)
			}
			if got, _ := e.s.Get(ctx, e.t1, "API_KEY"); !slices.Equal(got.Inject, []string{"query", "authorization"}) {
				t.Errorf("Got(Get after SetInject).Inject = %v; want [query authorization]", got.Inject)
			}
			if upd, err := e.s.SetInject(ctx, admin, e.t1, "API_KEY", nil); err != nil || !slices.Equal(upd.Inject, []string{"authorization"}) {
				t.Errorf("Got(SetInject nil) = %v, %v; want the default", upd.Inject, err)
			}
			evs, err := audit.NewLog(e.db, nil).List(ctx, e.t1, audit.Filter{Type: audit.TypeSecretUpdated})
			if err != nil || len(evs) != 2 {
				t.Fatalf("Got(secret.updated events) = %d, %v; want 2", len(evs), err)
			}
			if d := fmt.Sprint(evs[len(evs)-1].Details); !strings.Contains(d, "header:X-Api-Key") || !strings.Contains(d, "query") || strings.Contains(d, "key-value") {
				t.Errorf("Got(first secret.updated details) = %s; want from and to, no value", d)
			}
			if err := e.s.Revoke(ctx, admin, e.t1, "API_KEY"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.s.SetInject(ctx, admin, e.t1, "API_KEY", []string{"body"}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Got(SetInject revoked) err = %v; want ErrNotFound", err)
			}

			// A row from before migration 00013 (no inject column written).
			exp := time.Now().Add(time.Hour).UTC()
			if err := e.db.Exec("INSERT INTO secrets (id, tenant_id, name, hosts, ciphertext, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
				"old-row", e.t2, "OLD", `["old.example.com"]`, "v1:x", time.Now().UTC(), exp).Error; err != nil {
				t.Fatal(err)
			}
			if got, err := e.s.Get(ctx, e.t2, "OLD"); err != nil || !slices.Equal(got.Inject, []string{"authorization"}) {
				t.Errorf("Got(Get pre-migration row).Inject = %v, %v; want [authorization]", got.Inject, err)
			}
		})
	}
}
