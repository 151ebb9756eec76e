package web_test

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/web/webtest"
)

// usageFixture is two tenants with metered sandboxes this month (and one of
// A's last month), run through the real accounting path.
type usageFixture struct {
	env        *webtest.Env
	a, b       tenants.Tenant
	month      time.Time // first instant of this month
	aThisMonth []string  // A's sandboxes metered this month
	aLastMonth string
	bSandbox   string
}

func newUsageFixture(t *testing.T, db *gorm.DB) *usageFixture {
	t.Helper()
	env := webtest.New(t, webtest.Options{DB: db})
	f := &usageFixture{env: env, a: env.TenantNamed(t, "usage-alpha", "Usage Alpha"), b: env.TenantNamed(t, "usage-bravo", "Usage Bravo"),
		month: usage.MonthStart(time.Now())}
	id := func(string) string { return uuid.NewString() }
	runs := []webtest.Run{
		// Crosses an hour boundary; busy; some egress.
		{TenantID: f.a.ID, SandboxID: id("00000000a001"), Template: "busybox", UserID: "user-ada", UserName: "ada@usage-alpha.test",
			VCPUs: 2, MemoryMiB: 1024, Start: f.month.Add(time.Hour + 20*time.Minute), For: 90 * time.Minute, Cores: 1, UsedMiB: 200, GrowMiB: 300,
			EgressUp: 3_000_000, EgressDown: 7_000_000},
		// The next day, mostly idle, still running.
		{TenantID: f.a.ID, SandboxID: id("00000000a002"), Template: "debian", UserID: "user-bob", UserName: "bob@usage-alpha.test",
			VCPUs: 1, MemoryMiB: 512, Start: f.month.Add(26 * time.Hour), For: 2 * time.Hour, Cores: 0.1, UsedMiB: 64, Open: true},
		// Last month: outside this month's period.
		{TenantID: f.a.ID, SandboxID: id("00000000a003"), Template: "busybox", UserID: "user-ada", UserName: "ada@usage-alpha.test",
			VCPUs: 1, MemoryMiB: 256, Start: f.month.Add(-48 * time.Hour), For: time.Hour, Cores: 0.2, UsedMiB: 32},
		// Tenant B, this month: never visible to A.
		{TenantID: f.b.ID, SandboxID: id("00000000b001"), Template: "bravo-template", UserID: "user-bravo", UserName: "zed@usage-bravo.test",
			VCPUs: 4, MemoryMiB: 4096, Start: f.month.Add(3 * time.Hour), For: time.Hour, Cores: 2, UsedMiB: 900, EgressDown: 55_000_000},
	}
	for _, r := range runs {
		webtest.Meter(t, env.DB, r)
	}
	f.aThisMonth = []string{runs[0].SandboxID, runs[1].SandboxID}
	f.aLastMonth, f.bSandbox = runs[2].SandboxID, runs[3].SandboxID
	return f
}

// ledgerSums are the ledger's own sums for a tenant over [from, to), in
// the export's units.
func usageLedgerSums(t *testing.T, db *gorm.DB, tenantID string, from, to time.Time) map[string]float64 {
	t.Helper()
	var s struct {
		VCPU, MiB, CPU, Egress int64
	}
	err := db.Raw(`SELECT COALESCE(SUM(alloc_vcpu_ms),0) AS v_cpu, COALESCE(SUM(alloc_mib_ms),0) AS mi_b, COALESCE(SUM(cpu_ns),0) AS c_pu,
		COALESCE(SUM(egress_up_bytes + egress_down_bytes),0) AS egress FROM usage_ledger WHERE tenant_id = ? AND period_start >= ? AND period_start < ?`,
		tenantID, from.UTC(), to.UTC()).Row().Scan(&s.VCPU, &s.MiB, &s.CPU, &s.Egress)
	if err != nil {
		t.Fatalf("ledger sums: %v", err)
	}
	return map[string]float64{"vCPU-Seconds": float64(s.VCPU) / 1e3, "GiB-Seconds": float64(s.MiB) / 1024 / 1e3,
		"CPU-Seconds": float64(s.CPU) / 1e9, "GB": float64(s.Egress) / 1e9}
}

func usageNear(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// exportRows reads an export as records keyed by column.
func usageExportRows(t *testing.T, format, body string) []map[string]string {
	t.Helper()
	var out []map[string]string
	switch format {
	case "csv":
		recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatalf("parse the CSV export: %v", err)
		}
		if len(recs) == 0 || !slices.Equal(recs[0], usage.Columns) {
			t.Fatalf("Got(CSV header) = %v; want usage.Columns %v", recs[0], usage.Columns)
		}
		for _, rec := range recs[1:] {
			m := map[string]string{}
			for i, c := range usage.Columns {
				m[c] = rec[i]
			}
			out = append(out, m)
		}
	case "json":
		var rows []map[string]any
		if err := json.Unmarshal([]byte(body), &rows); err != nil {
			t.Fatalf("parse the JSON export: %v: %.300s", err, body)
		}
		for _, r := range rows {
			m := map[string]string{}
			for _, c := range usage.Columns {
				v, ok := r[c]
				if !ok {
					t.Fatalf("Got(JSON row) lacks %s; want every column: %v", c, r)
				}
				switch x := v.(type) {
				case string:
					m[c] = x
				case float64:
					m[c] = strconv.FormatFloat(x, 'f', -1, 64)
				default:
					b, _ := json.Marshal(x)
					m[c] = string(b)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// TestUsageExport: billing and admin export their tenant's usage as CSV and
// JSON whose quantities sum to the ledger's, with nothing of another tenant
// or outside the period; every export is audited with its period, format
// and rows; manager, developer and auditor cannot export.
func TestUsageExport(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testUsageExport(t, d.DB) })
	}
}

func testUsageExport(t *testing.T, db *gorm.DB) {
	f := newUsageFixture(t, db)
	env := f.env
	env.Member(t, f.a, "billing@usage-alpha.test", tenants.RoleBilling)
	from, to := f.month, f.month.AddDate(0, 1, 0)
	want := usageLedgerSums(t, env.DB, f.a.ID, from, to)
	if want["vCPU-Seconds"] == 0 || want["CPU-Seconds"] == 0 || want["GB"] == 0 {
		t.Fatalf("Got(ledger sums of A) = %v; want usage of every kind (the check would be empty)", want)
	}
	period := "from=" + from.Format(time.DateOnly) + "&to=" + to.AddDate(0, 0, -1).Format(time.DateOnly)
	clients := []struct {
		name   string
		client *webtest.Client
	}{
		{"billing session", env.Login(t, "billing@usage-alpha.test")},
		{"admin token", env.WithToken(env.Token(t, f.a, tenants.RoleAdmin))},
		{"billing token", env.WithToken(env.Token(t, f.a, tenants.RoleBilling))},
	}
	for _, c := range clients {
		for _, format := range []string{"csv", "json"} {
			for _, q := range []string{"?format=" + format + "&" + period, "?format=" + format} { // explicit, and the default (this month)
				t.Run(c.name+" "+q, func(t *testing.T) {
					before := len(env.Events(t, audit.TypeUsageExported))
					status, body, hdr := c.client.Request(t, http.MethodGet, "/api/v1/usage"+q, "", nil)
					if status != http.StatusOK {
						t.Fatalf("Got(GET /api/v1/usage%s) = %d %.300s; want 200", q, status, body)
					}
					wantType := map[string]string{"csv": "text/csv", "json": "application/json"}[format]
					if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
						t.Errorf("Got(Content-Type) = %q; want %s", ct, wantType)
					}
					if cd := hdr.Get("Content-Disposition"); !strings.Contains(cd, `filename="usage-usage-alpha-`) || !strings.HasSuffix(cd, "."+format+`"`) {
						t.Errorf("Got(Content-Disposition) = %q; want an attachment usage-usage-alpha-...%s", cd, format)
					}
					rows := usageExportRows(t, format, body)
					got := map[string]float64{}
					for _, r := range rows {
						if r["SubAccountId"] != f.a.ID || r["SubAccountName"] != f.a.Slug {
							t.Fatalf("Got(row of %s/%s); want only tenant A's rows", r["SubAccountId"], r["SubAccountName"])
						}
						if !slices.Contains(f.aThisMonth, r["ResourceId"]) {
							t.Errorf("Got(ResourceId) = %s; want one of A's sandboxes metered this month %v", r["ResourceId"], f.aThisMonth)
						}
						q, err := strconv.ParseFloat(r["ConsumedQuantity"], 64)
						if err != nil {
							t.Fatalf("Got(ConsumedQuantity) = %q: %v", r["ConsumedQuantity"], err)
						}
						got[r["ConsumedUnit"]] += q
					}
					for unit, w := range want {
						if !usageNear(got[unit], w) {
							t.Errorf("Got(sum of ConsumedQuantity in %s) = %v; want the ledger's %v", unit, got[unit], w)
						}
					}
					evs := env.Events(t, audit.TypeUsageExported)
					if len(evs) != before+1 {
						t.Fatalf("Got(usage.exported events) = %d; want %d", len(evs), before+1)
					}
					e := evs[len(evs)-1]
					if e.TenantID != f.a.ID || e.Outcome != audit.OutcomeSuccess || e.Details["format"] != format ||
						e.Details["from"] != from.Format(time.RFC3339) || e.Details["to"] != to.Format(time.RFC3339) ||
						e.Details["rows"] != float64(len(rows)) {
						t.Errorf("Got(audit event) = tenant %s outcome %s details %v; want A, success, format %s, %s to %s, %d rows",
							e.TenantID, e.Outcome, e.Details, format, from.Format(time.RFC3339), to.Format(time.RFC3339), len(rows))
					}
				})
			}
		}
	}

	t.Run("refused roles", func(t *testing.T) {
		for _, role := range []tenants.Role{tenants.RoleManager, tenants.RoleDeveloper, tenants.RoleAuditor} {
			before := len(env.Events(t, audit.TypeUsageExported))
			c := env.WithToken(env.Token(t, f.a, role))
			status, body, hdr := c.Request(t, http.MethodGet, "/api/v1/usage?format=csv", "", nil)
			if status != http.StatusForbidden {
				t.Errorf("Got(export as %s) = %d; want 403", role, status)
			} else if p := webtest.Problem(t, hdr, body); p.Status != http.StatusForbidden {
				t.Errorf("Got(problem of %s) = %+v; want 403", role, p)
			}
			if n := len(env.Events(t, audit.TypeUsageExported)); n != before {
				t.Errorf("Got(usage.exported events after %s's refused export) = %d; want %d", role, n, before)
			}
		}
	})
}

// TestUsageSummaryAndPages: the summary, the usage page and a sandbox's
// usage page show the tenant's own usage and nothing of another tenant;
// another tenant's sandbox is not found; managers read, developers and
// auditors do not; every role reads its quota.
func TestUsageSummaryAndPages(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testUsageSummaryAndPages(t, d.DB) })
	}
}

func testUsageSummaryAndPages(t *testing.T, db *gorm.DB) {
	f := newUsageFixture(t, db)
	env := f.env
	env.Member(t, f.a, "manager@usage-alpha.test", tenants.RoleManager)
	manager := env.Login(t, "manager@usage-alpha.test")
	bMarkers := []string{f.b.ID, f.bSandbox, usageShort(f.bSandbox), "bravo-template", "zed@usage-bravo.test", "user-bravo"}
	noB := func(t *testing.T, body string) {
		t.Helper()
		for _, m := range bMarkers {
			if strings.Contains(body, m) {
				t.Errorf("Got(body) contains %q of tenant B; want nothing of B", m)
			}
		}
	}

	t.Run("summary", func(t *testing.T) {
		var s struct {
			Tenant string `json:"tenant"`
			Totals struct {
				Cost        float64 `json:"cost"`
				Currency    string  `json:"currency"`
				VCPUSeconds float64 `json:"vcpu_seconds"`
				CPUSeconds  float64 `json:"cpu_seconds"`
				EgressBytes int64   `json:"egress_bytes"`
			} `json:"totals"`
			Sandboxes int `json:"sandboxes"`
			Daily     []struct {
				Day  string  `json:"day"`
				Cost float64 `json:"cost"`
			} `json:"daily"`
			Top struct {
				Sandboxes []struct{ Key, Label string } `json:"sandboxes"`
				Users     []struct{ Key, Label string } `json:"users"`
				Templates []struct{ Key, Label string } `json:"templates"`
			} `json:"top"`
		}
		status, body := manager.JSON(t, http.MethodGet, "/api/v1/usage/summary", nil, &s)
		if status != http.StatusOK {
			t.Fatalf("Got(summary as manager) = %d %.300s; want 200", status, body)
		}
		noB(t, body)
		want := usageLedgerSums(t, env.DB, f.a.ID, f.month, f.month.AddDate(0, 1, 0))
		if s.Tenant != f.a.Slug || s.Sandboxes != 2 || !usageNear(s.Totals.VCPUSeconds, want["vCPU-Seconds"]) ||
			!usageNear(s.Totals.CPUSeconds, want["CPU-Seconds"]) || float64(s.Totals.EgressBytes)/1e9 != want["GB"] || s.Totals.Currency != "USD" {
			t.Errorf("Got(summary) = %s %d sandboxes %+v; want %s, 2 sandboxes, the ledger's %v", s.Tenant, s.Sandboxes, s.Totals, f.a.Slug, want)
		}
		if days := f.month.AddDate(0, 1, 0).Sub(f.month).Hours() / 24; len(s.Daily) != int(days) || s.Daily[0].Day != f.month.Format(time.DateOnly) {
			t.Errorf("Got(daily) = %d days from %v; want %v from %s", len(s.Daily), s.Daily, days, f.month.Format(time.DateOnly))
		}
		sum := 0.0
		for _, d := range s.Daily {
			sum += d.Cost
		}
		if !usageNear(sum, s.Totals.Cost) || s.Totals.Cost <= 0 {
			t.Errorf("Got(sum of daily cost) = %v; want the total %v > 0", sum, s.Totals.Cost)
		}
		if len(s.Top.Sandboxes) != 2 || s.Top.Sandboxes[0].Key != f.aThisMonth[0] {
			t.Errorf("Got(top sandboxes) = %+v; want A's 2, the busy one first", s.Top.Sandboxes)
		}
		if len(s.Top.Users) != 2 || s.Top.Users[0].Label != "ada@usage-alpha.test" {
			t.Errorf("Got(top users) = %+v; want ada then bob, by name", s.Top.Users)
		}
		if len(s.Top.Templates) != 2 || s.Top.Templates[0].Key != "busybox" {
			t.Errorf("Got(top templates) = %+v; want busybox then debian", s.Top.Templates)
		}
	})

	t.Run("last month", func(t *testing.T) {
		var s struct {
			Sandboxes int `json:"sandboxes"`
			Top       struct {
				Sandboxes []struct{ Key string } `json:"sandboxes"`
			} `json:"top"`
		}
		last := f.month.AddDate(0, -1, 0)
		q := "?from=" + last.Format(time.DateOnly) + "&to=" + f.month.AddDate(0, 0, -1).Format(time.DateOnly)
		if status, body := manager.JSON(t, http.MethodGet, "/api/v1/usage/summary"+q, nil, &s); status != http.StatusOK {
			t.Fatalf("Got(summary%s) = %d %.300s; want 200", q, status, body)
		}
		if s.Sandboxes != 1 || len(s.Top.Sandboxes) != 1 || s.Top.Sandboxes[0].Key != f.aLastMonth {
			t.Errorf("Got(last month) = %+v; want only %s", s, f.aLastMonth)
		}
	})

	t.Run("usage page", func(t *testing.T) {
		status, body := manager.GetPage(t, "/usage")
		if status != http.StatusOK {
			t.Fatalf("Got(GET /usage) = %d; want 200: %.300s", status, body)
		}
		noB(t, body)
		for _, want := range []string{"<svg", `id="usage-chart"`, "<title", usageShort(f.aThisMonth[0]), "ada@usage-alpha.test", "debian",
			`id="usage-quota"`, f.month.Format("January 2006")} {
			if !strings.Contains(body, want) {
				t.Errorf("Got(/usage) lacks %q", want)
			}
		}
		if strings.Contains(body, `id="usage-export"`) {
			t.Errorf("Got(/usage as manager) has the export form; want it for usage.export holders only")
		}
		env.Member(t, f.a, "billing@usage-alpha.test", tenants.RoleBilling)
		billing := env.Login(t, "billing@usage-alpha.test")
		if _, body := billing.GetPage(t, "/usage"); !strings.Contains(body, `id="usage-export"`) {
			t.Errorf("Got(/usage as billing) lacks the export form")
		}
	})

	t.Run("sandbox usage page", func(t *testing.T) {
		status, body := manager.GetPage(t, "/usage/sandboxes/"+f.aThisMonth[0])
		if status != http.StatusOK {
			t.Fatalf("Got(own sandbox's usage) = %d; want 200: %.300s", status, body)
		}
		noB(t, body)
		for _, want := range []string{`id="sandbox-cpu-chart"`, `id="sandbox-memory-chart"`, `id="sandbox-usage-hours"`, "$0."} {
			if !strings.Contains(body, want) {
				t.Errorf("Got(sandbox usage page) lacks %q", want)
			}
		}
		env.Member(t, f.a, "admin@usage-alpha.test", tenants.RoleAdmin)
		for _, c := range []*webtest.Client{manager, env.Login(t, "admin@usage-alpha.test")} {
			before := env.Counts(t)
			if status, _ := c.GetPage(t, "/usage/sandboxes/"+f.bSandbox); status != http.StatusNotFound {
				t.Errorf("Got(B's sandbox's usage from A) = %d; want 404", status)
			}
			env.Unchanged(t, before)
		}
	})

	t.Run("sandbox page links its usage", func(t *testing.T) {
		sb := sandboxtest.RecordState(t, env.DB, f.a.ID, "ada@usage-alpha.test", sandbox.StateDestroyed)
		env.Member(t, f.a, "dev@usage-alpha.test", tenants.RoleDeveloper)
		for _, tc := range []struct {
			client *webtest.Client
			want   bool
		}{{manager, true}, {env.Login(t, "dev@usage-alpha.test"), false}} {
			status, body := tc.client.GetPage(t, "/sandboxes/"+sb.ID)
			if got := strings.Contains(body, `href="/usage/sandboxes/`+sb.ID+`"`); status != http.StatusOK || got != tc.want {
				t.Errorf("Got(sandbox page links its usage) = %d %v; want 200 %v", status, got, tc.want)
			}
		}
		// A sandbox that never ran: its usage page says so.
		if status, body := manager.GetPage(t, "/usage/sandboxes/"+sb.ID); status != http.StatusOK || !strings.Contains(body, `id="sandbox-usage-none"`) {
			t.Errorf("Got(usage of a sandbox never metered) = %d; want 200 saying nothing is metered", status)
		}
	})

	t.Run("roles", func(t *testing.T) {
		tests := []struct {
			role                      tenants.Role
			page, summary, quota, exp int
		}{
			{tenants.RoleAdmin, 200, 200, 200, 200},
			{tenants.RoleManager, 200, 200, 200, 403},
			{tenants.RoleBilling, 200, 200, 200, 200},
			{tenants.RoleDeveloper, 403, 403, 200, 403},
			{tenants.RoleAuditor, 403, 403, 200, 403},
		}
		for _, tc := range tests {
			t.Run(string(tc.role), func(t *testing.T) {
				email := "roles-" + string(tc.role) + "@usage-alpha.test"
				env.Member(t, f.a, email, tc.role)
				session, token := env.Login(t, email), env.WithToken(env.Token(t, f.a, tc.role))
				for _, x := range []struct {
					client *webtest.Client
					path   string
					want   int
				}{{session, "/usage", tc.page}, {session, "/usage/sandboxes/" + f.aThisMonth[0], tc.page},
					{token, "/api/v1/usage/summary", tc.summary}, {session, "/api/v1/usage/summary", tc.summary},
					{token, "/api/v1/quota", tc.quota}, {token, "/api/v1/usage", tc.exp}, {session, "/api/v1/usage", tc.exp}} {
					if status, body, _ := x.client.Request(t, http.MethodGet, x.path, "", nil); status != x.want {
						t.Errorf("Got(GET %s as %s) = %d; want %d: %.200s", x.path, tc.role, status, x.want, body)
					}
				}
			})
		}
	})
}

func usageShort(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// TestUsageBadInput: a malformed period or format is a 400 problem naming
// the field, and writes nothing (not even an audit event).
func TestUsageBadInput(t *testing.T) {
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := env.TenantNamed(t, "usage-bad", "Usage Bad")
	c := env.WithToken(env.Token(t, tn, tenants.RoleBilling))
	tests := []struct {
		path, field string
	}{
		{"/api/v1/usage?from=yesterday", "from"},
		{"/api/v1/usage?to=2026-13-01", "to"},
		{"/api/v1/usage?from=2026-11-05&to=2026-11-04", "to"},
		{"/api/v1/usage?from=2026-11-05T10:00:00Z&to=2026-11-05T10:00:00Z", "to"},
		{"/api/v1/usage?format=xml", "format"},
		{"/api/v1/usage?format=CSV", "format"},
		{"/api/v1/usage/summary?from=2026-11-31", "from"},
		{"/api/v1/usage/summary?from=2024-01-01&to=2026-01-01", "to"},
		{"/api/v1/usage/summary?to=" + url.QueryEscape("2026-11-05 10:00"), "to"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			before := env.Counts(t)
			status, body, hdr := c.Request(t, http.MethodGet, tc.path, "", nil)
			if status != http.StatusBadRequest {
				t.Fatalf("Got(GET %s) = %d %.200s; want 400", tc.path, status, body)
			}
			p := webtest.Problem(t, hdr, body)
			if len(p.Errors) != 1 || p.Errors[0].Field != tc.field {
				t.Errorf("Got(problem errors) = %+v; want one naming %s", p.Errors, tc.field)
			}
			env.Unchanged(t, before)
		})
	}
	t.Run("page", func(t *testing.T) {
		env.Member(t, tn, "billing@usage-bad.test", tenants.RoleBilling)
		s, body := env.Login(t, "billing@usage-bad.test").GetPage(t, "/usage?from=nope")
		if s != http.StatusBadRequest || !strings.Contains(body, "from") {
			t.Errorf("Got(/usage?from=nope) = %d; want a 400 page naming from: %.300s", s, body)
		}
	})
}

// TestUsagePeriodInclusive: to=DATE includes that whole day; RFC 3339 ends
// are exact (to exclusive).
func TestUsagePeriodInclusive(t *testing.T) {
	f := newUsageFixture(t, dbtest.SQLite(t))
	c := f.env.WithToken(f.env.Token(t, f.a, tenants.RoleBilling))
	day := f.month.AddDate(0, 0, 1) // A's second sandbox runs 02:00-04:00 on it
	ids := func(q string) map[string]bool {
		t.Helper()
		status, body, _ := c.Request(t, http.MethodGet, "/api/v1/usage?format=csv&"+q, "", nil)
		if status != http.StatusOK {
			t.Fatalf("Got(export %s) = %d %.200s; want 200", q, status, body)
		}
		out := map[string]bool{}
		for _, r := range usageExportRows(t, "csv", body) {
			out[r["ResourceId"]+" "+r["ChargePeriodStart"]] = true
		}
		return out
	}
	hour := func(h int) string {
		return f.aThisMonth[1] + " " + day.Add(time.Duration(h)*time.Hour).Format(time.RFC3339)
	}
	tests := []struct {
		q    string
		want []string
	}{
		{"from=" + day.Format(time.DateOnly) + "&to=" + day.Format(time.DateOnly), []string{hour(2), hour(3)}},
		{"from=" + url.QueryEscape(day.Add(3*time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(day.Add(4*time.Hour).Format(time.RFC3339)), []string{hour(3)}},
		{"from=" + url.QueryEscape(day.Add(2*time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(day.Add(3*time.Hour).Format(time.RFC3339)), []string{hour(2)}},
	}
	for _, tc := range tests {
		got := ids(tc.q)
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, w := range tc.want {
			if !got[w] {
				t.Errorf("Got(rows of %s) = %v; want %s", tc.q, keys, w)
			}
		}
		for k := range got {
			if !slices.Contains(tc.want, k) {
				t.Errorf("Got(rows of %s) has %s; want only %v", tc.q, k, tc.want)
			}
		}
	}
}

// TestQuotaWarning: at 80 % of a quota the API says warn and the
// dashboard, the usage page and the new-sandbox form show a warning; below,
// none shows.
func TestQuotaWarning(t *testing.T) {
	f := newUsageFixture(t, dbtest.SQLite(t))
	env := f.env
	env.Member(t, f.a, "admin@usage-alpha.test", tenants.RoleAdmin)
	admin := env.Login(t, "admin@usage-alpha.test")
	type quotaJSON struct {
		Quotas []usage.QuotaLine `json:"quotas"`
	}
	cpuLine := func() usage.QuotaLine {
		t.Helper()
		var q quotaJSON
		if s, body := admin.JSON(t, http.MethodGet, "/api/v1/quota", nil, &q); s != http.StatusOK {
			t.Fatalf("Got(GET /api/v1/quota) = %d %s; want 200", s, body)
		}
		for _, l := range q.Quotas {
			if l.Name == tenants.QuotaMaxCPUHoursMonthly {
				return l
			}
		}
		t.Fatalf("Got(quota lines) = %+v; want %s", q.Quotas, tenants.QuotaMaxCPUHoursMonthly)
		return usage.QuotaLine{}
	}
	// A used 1.5 + 0.2 CPU-hours this month.
	used := 1.5 + 0.2
	sys := audit.Actor{Kind: audit.ActorSystem, Name: "test"}
	for _, tc := range []struct {
		limit      int
		warn, over bool
	}{{1000, false, false}, {2, true, false}, {1, true, true}} {
		t.Run(strconv.Itoa(tc.limit), func(t *testing.T) {
			q := tenants.DefaultQuota()
			q.MaxCPUHoursMonthly = tc.limit
			if _, err := env.Store.SetQuota(t.Context(), sys, f.a.ID, q); err != nil {
				t.Fatal(err)
			}
			l := cpuLine()
			if math.Abs(l.Used-used) > 0.01 || l.Limit != float64(tc.limit) || l.Warn != tc.warn || l.Over != tc.over {
				t.Errorf("Got(cpu quota line) = %+v; want used %.2f of %d, warn %v, over %v", l, used, tc.limit, tc.warn, tc.over)
			}
			for _, path := range []string{"/", "/usage", "/sandboxes"} {
				s, body := admin.GetPage(t, path)
				if s != http.StatusOK {
					t.Fatalf("Got(GET %s) = %d; want 200", path, s)
				}
				shown := strings.Contains(body, `data-quota-warning="max_cpu_hours_monthly"`)
				if shown != tc.warn {
					t.Errorf("Got(warning on %s) = %v; want %v", path, shown, tc.warn)
				}
			}
		})
	}
}
