package web_test

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestReadOnlyRolesChangeNothing: auditors and managers read (ARCHITECTURE:
// managers "read all of the tenant", auditors are "read-only"). Every route
// that is not a GET is refused to them, signed in or with a token, and
// writes nothing at all; no page they may open offers them a form or
// button that changes anything. The only exceptions are the routes that
// act on the caller's own session (logout, switching tenant) or own API
// tokens (tokens.own: make one capped at their role, revoke their own),
// which every person may use.
func TestReadOnlyRolesChangeNothing(t *testing.T) {
	for _, role := range []tenants.Role{tenants.RoleAuditor, tenants.RoleManager} {
		t.Run(string(role), func(t *testing.T) { checkReadOnly(t, role) })
	}
}

// ownTokenRE matches the id in a page's revoke action of a token.
var ownTokenRE = regexp.MustCompile(`^/settings/tokens/[0-9a-f-]+/`)

func checkReadOnly(t *testing.T, role tenants.Role) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	email := string(role) + "@acme.test"
	env.Member(t, acme, email, role)
	f := &fixtures{env: env, tenant: acme}
	session := &caller{name: "session " + string(role), kind: "session", role: role, tenant: &acme, email: email}
	session.client = env.Login(t, session.email)
	token := &caller{name: "token " + string(role), kind: "token", role: role, tenant: &acme,
		client: env.WithToken(env.Token(t, acme, role))}

	own := map[string]bool{} // the caller's own session (logout, tenant switch) and tokens
	changing, pages := 0, 0
	for _, r := range env.App.RouteTable() {
		if r.Method == http.MethodGet {
			continue
		}
		if r.Perm == tenants.PermSignedIn || r.Perm == tenants.PermTokensOwn {
			t.Logf("%s %s: the caller's own session or tokens (allowed to every person)", r.Method, r.Path)
			own[paramRE.ReplaceAllString(r.Path, ":id")] = true
			continue
		}
		changing++
		t.Run(r.Method+" "+r.Path, func(t *testing.T) {
			cs := []*caller{session}
			if r.API {
				cs = append(cs, token)
			}
			for _, c := range cs {
				t.Run(c.name, func(t *testing.T) {
					path, _ := f.fill(t, r.Path)
					form, in := f.input(r, c, path)
					before := env.Counts(t)
					status, body, _ := call(t, c, r, path, form, in)
					if status != http.StatusForbidden && status != http.StatusUnauthorized {
						t.Errorf("Got(status) = %d %.200s; want 403: %s changes nothing", status, body, role)
					}
					env.Unchanged(t, before)
				})
			}
		})
	}
	if changing < 30 {
		t.Errorf("Got(state-changing routes checked) = %d; want the whole route table's (30 or more)", changing)
	}
	// The pages agree: none the role may open shows it a way to change
	// something (the server would refuse it anyway).
	for _, r := range env.App.RouteTable() {
		if r.API || r.Method != http.MethodGet || !r.Perm.TenantScoped() || !tenants.Can(role, r.Perm) {
			continue
		}
		path, _ := f.fill(t, r.Path)
		status, body, hdr := session.client.Request(t, http.MethodGet, path, "", nil)
		if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
			continue // a download, or an object this test has no fixture for
		}
		pages++
		for _, a := range webtest.ParseHTML(t, body).Actions() {
			if u, err := url.Parse(a); err == nil && (own[u.Path] || own[ownTokenRE.ReplaceAllString(u.Path, "/settings/tokens/:id/")]) {
				continue
			}
			t.Errorf("Got(GET %s as %s) offers %q; want no way to change anything", r.Path, role, a)
		}
	}
	if pages < 10 {
		t.Errorf("Got(pages checked) = %d; want every page of the role (10 or more)", pages)
	}
	// The role table agrees: no write permission is granted.
	for _, p := range []tenants.Permission{tenants.PermMembersWrite, tenants.PermTokensWrite, tenants.PermVMsWrite, tenants.PermSandboxesWrite,
		tenants.PermTerminalsDrive, tenants.PermPolicyWrite, tenants.PermSecretsWrite, tenants.PermComplianceRun, tenants.PermUsageExport,
		tenants.PermWorkflowsWrite, tenants.PermRunsWrite, tenants.PermIntegrationsWrite} {
		if tenants.Can(role, p) {
			t.Errorf("Got(Can(%s, %s)) = true; want false", role, p)
		}
	}
}

// TestAuditExportRecords: every line of the JSONL export is a JSON object
// carrying the tenant, the actor, the code, the time and the outcome; the
// CSV export has the same columns; the outcome filter takes denied; the
// export itself is audited with its filter.
func TestAuditExportRecords(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "admin@acme.test", tenants.RoleAdmin)
	env.Member(t, acme, "auditor@acme.test", tenants.RoleAuditor)
	admin := env.Login(t, "admin@acme.test")
	auditor := env.Login(t, "auditor@acme.test")
	if s, body := admin.JSON(t, http.MethodPost, "/api/v1/tokens", map[string]string{"name": "ci", "role": "developer", "ttl": "24h"}, nil); s != http.StatusCreated {
		t.Fatalf("Got(create token) = %d %s; want 201", s, body)
	}

	s, body, hdr := auditor.Request(t, http.MethodGet, "/api/v1/audit?format=jsonl", "", nil)
	if s != http.StatusOK || hdr.Get("Content-Type") != "application/jsonl" {
		t.Fatalf("Got(JSONL export) = %d %s; want 200 application/jsonl", s, hdr.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) < 4 {
		t.Fatalf("Got(%d lines); want the tenant's events (logins, invitations, the token)", len(lines))
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		for _, k := range []string{"tenant", "tenant_id", "actor_kind", "actor_id", "code", "time", "outcome", "type", "id"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("Got(line %d) without %q: %s; want tenant, actor, code, time and outcome on every line", i+1, k, line)
			}
		}
		if rec["tenant"] != "acme-corp" || rec["tenant_id"] != acme.ID || !slices.Contains(audit.Outcomes(), rec["outcome"].(string)) {
			t.Errorf("Got(line %d) tenant %v / %v, outcome %v; want acme-corp, its id and a known outcome", i+1, rec["tenant"], rec["tenant_id"], rec["outcome"])
		}
	}

	s, body, _ = auditor.Request(t, http.MethodGet, "/api/v1/audit?format=csv", "", nil)
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if s != http.StatusOK || err != nil || len(recs) < 2 {
		t.Fatalf("Got(CSV export) = %d, %v, %d rows; want a header and rows", s, err, len(recs))
	}
	for _, col := range []string{"tenant", "tenant_id", "actor_kind", "actor_id", "code", "time", "outcome"} {
		if !slices.Contains(recs[0], col) {
			t.Errorf("Got(CSV header) = %v; want %q", recs[0], col)
		}
	}

	if s, _, _ := auditor.Request(t, http.MethodGet, "/api/v1/audit?format=jsonl&outcome=denied", "", nil); s != http.StatusOK {
		t.Errorf("Got(outcome=denied) = %d; want 200", s)
	}
	exports := env.Events(t, audit.TypeAuditExported)
	last := exports[len(exports)-1]
	if f, _ := last.Details["filter"].(map[string]any); last.ActorName != "auditor@acme.test" || f["outcome"] != "denied" || last.Details["format"] != "jsonl" {
		t.Errorf("Got(last audit.exported) = %+v; want the auditor's, with its format and filter", last)
	}
	// The page offers the denied outcome.
	if _, page := auditor.GetPage(t, "/audit?"+url.Values{"outcome": {"denied"}}.Encode()); !strings.Contains(page, `value="denied"`) {
		t.Error("Got(audit page) without the denied outcome in its filter; want it")
	}
}
