package web_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/compliance"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/web/webtest"
)

// complianceEnv is the app with a real compliance service on its database
// (no sandboxes: the probe cannot run here, see tenants/compliance and
// sandbox/probe for the real-VM runs), an acme tenant with a member of every
// role and a second tenant.
type complianceEnv struct {
	env    *webtest.Env
	svc    *compliance.Service
	acme   tenants.Tenant
	globex tenants.Tenant
	// people by role, signed in
	people map[tenants.Role]*webtest.Client
	tokens map[tenants.Role]*webtest.Client
	other  *webtest.Client // globex's admin
}

func newComplianceEnv(t *testing.T, o webtest.Options) *complianceEnv {
	t.Helper()
	return newComplianceEnvOn(t, o, compliance.Platform{Gateway: true, SecretsEncrypted: true})
}

// newComplianceEnvOn is newComplianceEnv on a platform configured as p.
func newComplianceEnvOn(t *testing.T, o webtest.Options, p compliance.Platform) *complianceEnv {
	t.Helper()
	db := dbtest.SQLite(t)
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	pol, err := policy.NewStore(db, o.Clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := compliance.New(db, compliance.Config{Policies: pol, Tenants: tenants.NewStore(db, o.Clock.Now), Clock: o.Clock,
		Platform: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	o.DB, o.Policies, o.Compliance = db, pol, svc
	env := webtest.New(t, o)
	ce := &complianceEnv{env: env, svc: svc, acme: env.TenantNamed(t, "acme-corp", "Acme Corporation"),
		globex: env.TenantNamed(t, "globex", "Globex"), people: map[tenants.Role]*webtest.Client{}, tokens: map[tenants.Role]*webtest.Client{}}
	for _, r := range tenants.Roles {
		email := string(r) + "@acme.test"
		env.Member(t, ce.acme, email, r)
		ce.people[r] = env.Login(t, email)
		ce.tokens[r] = env.WithToken(env.Token(t, ce.acme, r))
	}
	env.Member(t, ce.globex, "admin@globex.test", tenants.RoleAdmin)
	ce.other = env.Login(t, "admin@globex.test")
	return ce
}

// complianceJSON is GET /api/v1/compliance.
type complianceJSON struct {
	Tenant    string         `json:"tenant"`
	CheckedAt *string        `json:"checked_at"`
	Summary   map[string]int `json:"summary"`
	Items     []struct {
		ID        string `json:"id"`
		Question  string `json:"question"`
		Status    string `json:"status"`
		Evidence  []struct{ Kind, Text, Link string }
		CheckedAt string `json:"checked_at"`
		Since     string `json:"since"`
	} `json:"items"`
	History []struct {
		ItemID string `json:"item_id"`
		From   string `json:"from"`
		To     string `json:"to"`
		At     string `json:"at"`
	} `json:"history"`
}

func (c complianceJSON) item(id string) (status string, evidence []string) {
	for _, it := range c.Items {
		if it.ID == id {
			for _, e := range it.Evidence {
				evidence = append(evidence, e.Text)
			}
			return it.Status, evidence
		}
	}
	return "", nil
}

// TestComplianceAPI: GET /api/v1/compliance answers every item with id,
// question, status, evidence, checked_at and since, to the roles that may
// read it; weakening the policy turns the matching items within one
// evaluation, and the history says so.
func TestComplianceAPI(t *testing.T) {
	ce := newComplianceEnv(t, webtest.Options{})
	get := func(t *testing.T, c *webtest.Client) complianceJSON {
		t.Helper()
		var out complianceJSON
		if s, body := c.JSON(t, http.MethodGet, "/api/v1/compliance", nil, &out); s != http.StatusOK {
			t.Fatalf("Got(GET /api/v1/compliance) = %d %s; want 200", s, body)
		}
		return out
	}

	t.Run("every item", func(t *testing.T) {
		out := get(t, ce.tokens[tenants.RoleAuditor])
		var ids []string
		for _, it := range out.Items {
			ids = append(ids, it.ID)
			if it.Question == "" || !slices.Contains([]string{"pass", "warn", "fail"}, it.Status) || it.Evidence == nil {
				t.Errorf("Got(item %s) = %+v; want a question, a status and evidence", it.ID, it)
			}
			for _, ts := range []string{it.CheckedAt, it.Since} {
				if _, err := time.Parse(time.RFC3339, ts); err != nil {
					t.Errorf("Got(item %s time) = %q; want RFC 3339", it.ID, ts)
				}
			}
		}
		if !slices.Equal(ids, compliance.ItemIDs()) || len(ids) != 14 {
			t.Errorf("Got(item ids) = %v; want the 14 of the checklist, in order", ids)
		}
		if out.Tenant != ce.acme.Slug || out.CheckedAt == nil || out.Summary["pass"]+out.Summary["warn"]+out.Summary["fail"] != 14 {
			t.Errorf("Got(tenant, checked_at, summary) = %s, %v, %v; want acme-corp, set, 14 counted", out.Tenant, out.CheckedAt, out.Summary)
		}
	})

	t.Run("roles", func(t *testing.T) {
		tests := []struct {
			role           tenants.Role
			read, runProbe int
		}{
			{tenants.RoleAdmin, http.StatusOK, http.StatusServiceUnavailable}, // allowed; no sandboxes on this server
			{tenants.RoleManager, http.StatusOK, http.StatusForbidden},
			{tenants.RoleAuditor, http.StatusOK, http.StatusForbidden},
			{tenants.RoleDeveloper, http.StatusForbidden, http.StatusForbidden},
			{tenants.RoleBilling, http.StatusForbidden, http.StatusForbidden},
		}
		for _, tc := range tests {
			t.Run(string(tc.role), func(t *testing.T) {
				for _, c := range []*webtest.Client{ce.people[tc.role], ce.tokens[tc.role]} {
					if s, body := c.JSON(t, http.MethodGet, "/api/v1/compliance", nil, nil); s != tc.read {
						t.Errorf("Got(GET /api/v1/compliance) = %d %.200s; want %d", s, body, tc.read)
					}
					if s, body := c.JSON(t, http.MethodPost, "/api/v1/compliance/probe", nil, nil); s != tc.runProbe {
						t.Errorf("Got(POST /api/v1/compliance/probe) = %d %.200s; want %d", s, body, tc.runProbe)
					}
				}
			})
		}
	})

	t.Run("weakened policy", func(t *testing.T) {
		admin := ce.people[tenants.RoleAdmin]
		before := get(t, admin)
		egressBefore, _ := before.item(compliance.ItemEgressRestricted)
		// Without a probe run here it is at best warn; never fail.
		if egressBefore == "fail" || egressBefore == "" {
			t.Fatalf("Got(egress_restricted with the strict default policy) = %q; want pass or warn", egressBefore)
		}
		doc := policy.Defaults()
		doc.Network.Egress.Default = policy.EgressAllow
		doc.Lifetime.MaxTimeoutSeconds, doc.Lifetime.DefaultTimeoutSeconds = 604800, 604800
		if s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": doc, "reason": "weaken for the test"}, nil); s != http.StatusOK {
			t.Fatalf("Got(PUT /api/v1/policy) = %d %s; want 200", s, body)
		}
		// One evaluation cycle.
		if _, err := ce.svc.Evaluate(context.Background(), ce.acme.ID); err != nil {
			t.Fatalf("Evaluate = %v", err)
		}
		after := get(t, ce.people[tenants.RoleAuditor])
		if st, ev := after.item(compliance.ItemEgressRestricted); st != "fail" || !strings.Contains(strings.Join(ev, "|"), "allows egress by default") {
			t.Errorf("Got(egress_restricted) = %s %q; want fail, saying the policy allows egress by default", st, ev)
		}
		if st, ev := after.item(compliance.ItemTimeLimits); st == "pass" || !strings.Contains(strings.Join(ev, "|"), "lets a sandbox live up to 7d") {
			t.Errorf("Got(time_limits) = %s %q; want warn or fail naming the week-long lifetime", st, ev)
		}
		found := false
		for _, h := range after.History {
			if h.ItemID == compliance.ItemEgressRestricted && h.From == egressBefore && h.To == "fail" {
				found = true
			}
		}
		if !found {
			t.Errorf("Got(history) = %+v; want egress_restricted %s -> fail", after.History, egressBefore)
		}
		if evs := ce.env.Events(t, audit.TypeComplianceStatusChanged); len(evs) == 0 {
			t.Error("Got(compliance.status_changed events) = none; want the change audited")
		}
		// The other tenant's checklist is its own.
		var other complianceJSON
		if s, _ := ce.other.JSON(t, http.MethodGet, "/api/v1/compliance", nil, &other); s != http.StatusOK {
			t.Fatalf("Got(globex GET) = %d; want 200", s)
		}
		if st, _ := other.item(compliance.ItemEgressRestricted); st != egressBefore || other.Tenant != "globex" {
			t.Errorf("Got(globex egress_restricted) = %s (tenant %s); want %s: acme's policy is not globex's", st, other.Tenant, egressBefore)
		}
	})
}

// recordProbeRun stores a finished probe run of tenantID, as the
// compliance service records one (the probe itself needs VMs).
func recordProbeRun(t *testing.T, db *gorm.DB, tenantID, output string, checks []compliance.ProbeCheck) string {
	t.Helper()
	id := uuid.Must(uuid.NewV7()).String()
	b, err := json.Marshal(checks)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	end := start.Add(40 * time.Second)
	if err := db.Exec(`INSERT INTO probe_runs (id, tenant_id, sandbox_id, state, actor_kind, actor_id, actor_name, started_at, ended_at, checks, output, error)
		VALUES (?, ?, ?, 'completed', 'system', 'compliance', 'compliance checks', ?, ?, ?, ?, '')`,
		id, tenantID, uuid.Must(uuid.NewV7()).String(), start, end, string(b), output).Error; err != nil {
		t.Fatalf("record probe run: %v", err)
	}
	return id
}

// TestComplianceProbeRuns: probe runs are listed and shown to the tenant's
// readers with their checks and output; another tenant's run is not found.
func TestComplianceProbeRuns(t *testing.T) {
	ce := newComplianceEnv(t, webtest.Options{})
	checks := []compliance.ProbeCheck{{ID: compliance.CheckSSHKeys, Name: compliance.CheckName(compliance.CheckSSHKeys), Outcome: compliance.OutcomeBlocked, Detail: "no keys"},
		{ID: compliance.CheckInternetProxy, Name: compliance.CheckName(compliance.CheckInternetProxy), Outcome: compliance.OutcomeEscaped, Detail: "200 from 127.0.0.1"}}
	mine := recordProbeRun(t, ce.env.DB, ce.acme.ID, "probe says <script>hi</script>\n", checks)
	theirs := recordProbeRun(t, ce.env.DB, ce.globex.ID, "globex output\n", checks)
	auditor := ce.people[tenants.RoleAuditor]

	var run struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Output string `json:"output"`
		Checks []compliance.ProbeCheck
	}
	if s, body := ce.tokens[tenants.RoleAuditor].JSON(t, http.MethodGet, "/api/v1/compliance/probes/"+mine, nil, &run); s != http.StatusOK ||
		run.ID != mine || run.State != "completed" || len(run.Checks) != 2 || !strings.Contains(run.Output, "probe says") {
		t.Errorf("Got(GET own probe run) = %d %+v %.200s; want 200 with checks and output", s, run, body)
	}
	var list struct {
		Runs []struct{ ID, Output string } `json:"probe_runs"`
	}
	if s, _ := auditor.JSON(t, http.MethodGet, "/api/v1/compliance/probes", nil, &list); s != http.StatusOK || len(list.Runs) != 1 || list.Runs[0].ID != mine {
		t.Errorf("Got(GET probe runs) = %d %+v; want only acme's run", s, list)
	}

	tests := []struct {
		name, path string
		want       int
	}{
		{"own run page", "/compliance/probes/" + mine, http.StatusOK},
		{"other tenant's run page", "/compliance/probes/" + theirs, http.StatusNotFound},
		{"other tenant's run API", "/api/v1/compliance/probes/" + theirs, http.StatusNotFound},
		{"no such run", "/api/v1/compliance/probes/" + uuid.Must(uuid.NewV7()).String(), http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, body, _ := auditor.Request(t, http.MethodGet, tc.path, "", nil)
			if s != tc.want {
				t.Fatalf("Got(GET %s) = %d; want %d", tc.path, s, tc.want)
			}
			if strings.Contains(body, "globex output") {
				t.Errorf("Got(body) shows globex's probe output; want it hidden")
			}
			if s == http.StatusOK && (strings.Contains(body, "<script>hi</script>") || !strings.Contains(body, "escaped")) {
				t.Errorf("Got(run page) unescaped output or without its checks")
			}
		})
	}
	// The compliance page lists the run and links to it.
	_, page := auditor.GetPage(t, "/compliance")
	if !strings.Contains(page, `href="/compliance/probes/`+mine+`"`) || strings.Contains(page, theirs) {
		t.Errorf("Got(compliance page) without a link to acme's run, or with globex's; want only acme's")
	}
}

// TestCompliancePageAndExport: the page shows every item as an expandable
// entry, the incident-response contacts and runbook from the policy; the
// print view opens every item; the JSON export holds the checklist, probe
// runs and incident response, and is audited.
func TestCompliancePageAndExport(t *testing.T) {
	ce := newComplianceEnv(t, webtest.Options{})
	admin := ce.people[tenants.RoleAdmin]
	doc := policy.Defaults()
	doc.IncidentResponse.NotifyEmails = []string{"secops@acme.test"}
	doc.IncidentResponse.RunbookURL = "https://wiki.acme.test/runbooks/agent"
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/policy", map[string]any{"policy": doc, "reason": "incident contacts"}, nil); s != http.StatusOK {
		t.Fatalf("Got(PUT /api/v1/policy) = %d %s; want 200", s, body)
	}
	// A runbook that is not http(s) is refused, naming the field.
	bad := doc
	bad.IncidentResponse.RunbookURL = "javascript:alert(1)"
	if s, body, h := admin.Request(t, http.MethodPut, "/api/v1/policy", "application/json",
		strings.NewReader(mustJSON(t, map[string]any{"policy": bad, "reason": "x"})), "X-CSRF-Token", admin.CSRF(t)); s != http.StatusUnprocessableEntity {
		t.Errorf("Got(PUT a javascript: runbook) = %d; want 422", s)
	} else if p := webtest.Problem(t, h, body); len(p.Errors) == 0 || p.Errors[0].Field != "/incident_response/runbook_url" {
		t.Errorf("Got(problem) = %+v; want the runbook_url field named", p)
	}

	for _, role := range []tenants.Role{tenants.RoleAuditor, tenants.RoleManager, tenants.RoleAdmin} {
		t.Run(string(role), func(t *testing.T) {
			c := ce.people[role]
			s, page := c.GetPage(t, "/compliance")
			if s != http.StatusOK {
				t.Fatalf("Got(GET /compliance) = %d; want 200", s)
			}
			d := webtest.ParseHTML(t, page)
			if ids := d.IDs("item-"); len(ids) != 14 {
				t.Errorf("Got(items on the page) = %d; want 14", len(ids))
			}
			for _, want := range []string{"<details", "<summary", "secops@acme.test", `href="https://wiki.acme.test/runbooks/agent"`,
				`href="/compliance/export"`, `href="/compliance/print"`, `id="scorecard"`} {
				if !strings.Contains(page, want) {
					t.Errorf("Got(page) without %q; want it", want)
				}
			}
			if got := strings.Contains(page, `action="/compliance/probe"`); got != (role == tenants.RoleAdmin) {
				t.Errorf("Got(run-probe button) = %v; want it for admins only", got)
			}
		})
	}
	for _, role := range []tenants.Role{tenants.RoleDeveloper, tenants.RoleBilling} {
		if s, _ := ce.people[role].GetPage(t, "/compliance"); s != http.StatusForbidden {
			t.Errorf("Got(GET /compliance as %s) = %d; want 403", role, s)
		}
	}

	auditor := ce.people[tenants.RoleAuditor]
	if s, page := auditor.GetPage(t, "/compliance/print"); s != http.StatusOK || strings.Count(page, "<details open") < 14 ||
		strings.Contains(page, `class="sidenav"`) {
		t.Errorf("Got(print view) = %d with %d open items; want 200, every item open, no navigation", s, strings.Count(page, "<details open"))
	}

	before := len(ce.env.Events(t, audit.TypeComplianceExported))
	s, body, hdr := auditor.Request(t, http.MethodGet, "/compliance/export", "", nil)
	if s != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") ||
		!strings.Contains(hdr.Get("Content-Disposition"), `filename="compliance-acme-corp-`) {
		t.Fatalf("Got(export) = %d %s %s; want a JSON attachment", s, hdr.Get("Content-Type"), hdr.Get("Content-Disposition"))
	}
	var exp struct {
		Tenant   string            `json:"tenant"`
		Items    []json.RawMessage `json:"items"`
		Probes   []json.RawMessage `json:"probe_runs"`
		Incident *struct {
			PolicyVersion int      `json:"policy_version"`
			Contacts      []string `json:"contacts"`
			RunbookURL    string   `json:"runbook_url"`
		} `json:"incident_response"`
	}
	if err := json.Unmarshal([]byte(body), &exp); err != nil {
		t.Fatalf("decode export: %v", err)
	}
	if exp.Tenant != "acme-corp" || len(exp.Items) != 14 || exp.Probes == nil || exp.Incident == nil ||
		exp.Incident.RunbookURL != doc.IncidentResponse.RunbookURL || exp.Incident.PolicyVersion != 1 {
		t.Errorf("Got(export) = tenant %s, %d items, probes %v, incident %+v; want all of it", exp.Tenant, len(exp.Items), exp.Probes, exp.Incident)
	}
	evs := ce.env.Events(t, audit.TypeComplianceExported)
	if len(evs) != before+1 || evs[len(evs)-1].ActorName != "auditor@acme.test" || evs[len(evs)-1].TenantID != ce.acme.ID {
		t.Errorf("Got(compliance.exported events) = %d; want one more, by the auditor", len(evs))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
