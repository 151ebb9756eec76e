package tenants_test

import (
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/stockade-dev/stockade/migrations"
	"github.com/stockade-dev/stockade/tenants"
)

// Migration 00016 gives the tokens that exist already the person behind
// them, so the tokens of a member removed before it stop working too: a
// user's own, the ones their tokens made (a chain), none for the admin
// command's.
func TestTokenCreatorBackfill(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		acme := e.tenant(t, "acme")
		ann := e.login(t, "ann", "ann@example.com")
		sqlDB, err := e.db.DB()
		if err != nil {
			t.Fatal(err)
		}
		dialect := goose.DialectSQLite3
		if e.name == "postgres" {
			dialect = goose.DialectPostgres
		}
		p, err := goose.NewProvider(dialect, sqlDB, migrations.FS)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, 15); err != nil {
			t.Fatalf("migrate down to 15: %v", err)
		}
		now := time.Now().UTC()
		for _, r := range []struct{ id, by string }{
			{"t-ann", ann.ID}, {"t-child", "t-ann"}, {"t-grandchild", "t-child"}, {"t-cli", "cli"}, {"t-cli-child", "t-cli"},
		} {
			if err := e.db.Exec(`INSERT INTO api_tokens (id, tenant_id, name, prefix, hash, role, created_by, created_at, expires_at)
				VALUES (?, ?, ?, ?, ?, 'admin', ?, ?, ?)`, r.id, acme.ID, r.id, "stk_"+r.id, "hash-"+r.id, r.by, now, now.Add(time.Hour)).Error; err != nil {
				t.Fatalf("insert %s: %v", r.id, err)
			}
		}
		if _, err := p.Up(ctx); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
		for id, want := range map[string]string{"t-ann": ann.ID, "t-child": ann.ID, "t-grandchild": ann.ID, "t-cli": "", "t-cli-child": ""} {
			var tok tenants.APIToken
			if err := e.db.Take(&tok, "id = ?", id).Error; err != nil {
				t.Fatal(err)
			}
			got := ""
			if tok.CreatedByUserID != nil {
				got = *tok.CreatedByUserID
			}
			if got != want {
				t.Errorf("Got(%s.created_by_user_id) = %q; want %q", id, got, want)
			}
		}
	})
}
