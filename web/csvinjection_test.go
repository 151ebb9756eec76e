package web_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// csvFormulas are cells a spreadsheet would evaluate (OWASP CSV injection),
// one for each character that starts a formula.
var csvFormulas = []string{`=cmd|' /C calc'!A0`, "+HYPERLINK(\"http://evil.test\")", "-2+3+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|' /C calc'!A0",
	"\t=1+1", "\r=1+1"}

// checkCSVDefused fails on any cell of a CSV export that a spreadsheet would
// take for a formula, and on a payload that did not reach the export (with
// its defusing quote), so the test cannot pass by exporting nothing.
func checkCSVDefused(t *testing.T, name, body string, payloads []string) {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("Got(%s) = %d records, %v; want a header and rows: %s", name, len(recs), err, body)
	}
	seen := map[string]bool{}
	for i, rec := range recs {
		for j, cell := range rec {
			if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
				t.Errorf("Got(%s row %d cell %d) = %q; want a cell starting with = + - @ TAB or CR quoted with '", name, i, j, cell)
			}
			for _, p := range payloads {
				if strings.HasPrefix(cell, "'"+p) {
					seen[p] = true
				}
			}
		}
	}
	for _, p := range payloads {
		if !seen[p] {
			t.Errorf("Got(%s) without a cell '%q...; want the payload exported, defused", name, p)
		}
	}
}

// TestCSVExportsDefuseFormulas: every CSV export (the audit log, the
// tenant's usage export, the operators' usage export) writes a cell that
// starts with = + - @ TAB or CR with a leading single quote, whoever put
// the value there: a token's name, a request id the client sent, a sandbox
// id in the ledger.
func TestCSVExportsDefuseFormulas(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	env := webtest.New(t, webtest.Options{Operators: []string{opEmail}, Clock: clockwork.NewFakeClockAt(now)})
	ctx := context.Background()
	acme := env.TenantNamed(t, "acme-corp", "Acme")
	admin := env.WithToken(env.Token(t, acme, tenants.RoleAdmin))

	// Audit log: tokens named like formulas act, and requests carry
	// formula request ids.
	for _, p := range csvFormulas[:4] {
		secret, _ := env.NewToken(t, acme, p, tenants.RoleAdmin)
		if s, body := env.WithToken(secret).JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "ci", "role": "developer", "ttl": "24h"}, nil); s != http.StatusCreated {
			t.Fatalf("Got(create a token as %q) = %d %s; want 201", p, s, body)
		}
		if s, body, _ := admin.Request(t, http.MethodPost, "/api/v1/tokens", "application/json",
			strings.NewReader(`{"name":"ci","role":"developer","ttl":"24h"}`), "X-Request-ID", p); s != http.StatusCreated {
			t.Fatalf("Got(create a token with request id %q) = %d %s; want 201", p, s, body)
		}
	}
	// Tabs and carriage returns cannot come through a header or a token
	// name; an actor's name from an identity provider can hold them.
	for _, p := range csvFormulas[4:] {
		a := audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: p}
		if err := env.Audit.Record(ctx, a.Event(acme.ID, audit.TypeLogin, "user", "u-1", nil)); err != nil {
			t.Fatal(err)
		}
	}
	s, body, _ := admin.Request(t, http.MethodGet, "/api/v1/audit?format=csv", "", nil)
	if s != http.StatusOK {
		t.Fatalf("Got(GET /api/v1/audit?format=csv) = %d %s; want 200", s, body)
	}
	checkCSVDefused(t, "audit csv", body, csvFormulas)

	// Usage: sandbox ids in the ledger.
	month := now.AddDate(0, 0, -5)
	for i, p := range csvFormulas {
		opMeter(t, env.DB, acme.ID, p, 1, 512, month.Add(time.Duration(i)*time.Hour), 30*time.Minute, 10*time.Second, 1e6)
	}
	billing := env.WithToken(env.Token(t, acme, tenants.RoleBilling))
	s, body, _ = billing.Request(t, http.MethodGet, "/api/v1/usage?format=csv", "", nil)
	if s != http.StatusOK {
		t.Fatalf("Got(GET /api/v1/usage?format=csv) = %d %s; want 200", s, body)
	}
	checkCSVDefused(t, "usage csv", body, csvFormulas)

	op := env.Login(t, opEmail)
	s, body, _ = op.Request(t, http.MethodGet, "/api/v1/operator/usage?format=csv", "", nil)
	if s != http.StatusOK {
		t.Fatalf("Got(GET /api/v1/operator/usage?format=csv) = %d %s; want 200", s, body)
	}
	checkCSVDefused(t, "operator usage csv", body, csvFormulas)
}
