package web_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chromedp/chromedp"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/web/webtest"
)

const opEmail = "ops@platform.test"

var opSystem = audit.Actor{Kind: audit.ActorSystem, ID: "operator-usage-test"}

// opMeter meters one sandbox through the real accounting path: opened,
// sampled after d with cpu of CPU time, closed, with egress bytes.
func opMeter(t testing.TB, db *gorm.DB, tenantID, id string, vcpus, memMiB int, start time.Time, d, cpu time.Duration, egress int64) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := usage.Open(tx, usage.Meter{SandboxID: id, TenantID: tenantID, Template: "busybox", UserID: "user-" + tenantID[:4],
			VCPUs: vcpus, MemoryMiB: memMiB, StartedAt: start}); err != nil {
			return err
		}
		end := start.Add(d)
		if _, err := usage.Observe(tx, id, &usage.Sample{At: end, CPUNS: cpu.Nanoseconds(), MemoryPeakBytes: 100 << 20}, &end); err != nil {
			return err
		}
		return usage.Egress(tx, tenantID, id, egress/4, egress-egress/4, start.Add(d/2))
	})
	if err != nil {
		t.Fatalf("meter sandbox %s: %v", id, err)
	}
}

// opPriceFrom sets p as an operator did at p.EffectiveFrom: a price is
// never back-dated, so the store's clock stands there.
func opPriceFrom(t testing.TB, db *gorm.DB, p usage.Price) usage.Price {
	t.Helper()
	saved, err := usage.NewStore(db, func() time.Time { return p.EffectiveFrom }).SetPrice(context.Background(), opSystem, p)
	if err != nil {
		t.Fatalf("set price from %s: %v", p.EffectiveFrom, err)
	}
	return saved
}

type opProblem struct {
	Status int `json:"status"`
	Errors []struct {
		Field string `json:"field"`
	} `json:"errors"`
}

func (p opProblem) field() string {
	if len(p.Errors) == 0 {
		return ""
	}
	return p.Errors[0].Field
}

// TestOperatorUsageExport: an operator exports every tenant's usage over a
// period in CSV and JSON; the sums per tenant and unit equal the ledger's;
// last month's rows are outside the period; the export is audited with
// scope all; bad input is a 400 naming the field; tenants' own roles get
// 403. SQLite and PostgreSQL.
func TestOperatorUsageExport(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
			env := webtest.New(t, webtest.Options{DB: d.DB, Operators: []string{opEmail}, Clock: clockwork.NewFakeClockAt(now)})
			ctx := context.Background()
			a := env.TenantNamed(t, "export-a", "Export A")
			b := env.TenantNamed(t, "export-b", "Export B")
			month := usage.MonthStart(now)
			opPriceFrom(t, env.DB, usage.Price{TenantID: b.ID, Currency: "EUR", VCPUSecond: 0.001, GiBSecond: 0.0001,
				EgressGB: 0.5, EffectiveFrom: month})
			for i := range 3 {
				opMeter(t, env.DB, a.ID, fmt.Sprintf("a-%d", i), 2, 1024, month.Add(time.Duration(24*i+3)*time.Hour), 90*time.Minute, 40*time.Second, 2e9)
			}
			opMeter(t, env.DB, b.ID, "b-0", 4, 4096, month.Add(50*time.Hour+15*time.Minute), 3*time.Hour, 7*time.Minute, 5e8)
			opMeter(t, env.DB, b.ID, "b-old", 4, 4096, month.Add(-72*time.Hour), time.Hour, time.Minute, 0)

			op := env.Login(t, opEmail)
			q := "from=" + month.Format("2006-01-02") + "&to=" + now.Format("2006-01-02")
			status, body, hdr := op.Request(t, http.MethodGet, "/api/v1/operator/usage?"+q+"&format=csv", "", nil)
			if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") ||
				!strings.Contains(hdr.Get("Content-Disposition"), "usage-all-") {
				t.Fatalf("Got(GET operator usage csv) = %d %s %s; want 200 text/csv attachment: %s", status, hdr.Get("Content-Type"),
					hdr.Get("Content-Disposition"), body)
			}
			recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
			if err != nil || len(recs) < 2 {
				t.Fatalf("Got(parse csv) = %d records, %v; want a header and rows", len(recs), err)
			}
			if got, want := strings.Join(recs[0], ","), strings.Join(usage.Columns, ","); got != want {
				t.Fatalf("Got(csv header) = %s; want %s", got, want)
			}
			col := map[string]int{}
			for i, c := range recs[0] {
				col[c] = i
			}
			// Sums per tenant and unit, from the export.
			sums := map[string]float64{}
			for _, r := range recs[1:] {
				v, err := strconv.ParseFloat(r[col["ConsumedQuantity"]], 64)
				if err != nil {
					t.Fatalf("ConsumedQuantity %q: %v", r[col["ConsumedQuantity"]], err)
				}
				sums[r[col["SubAccountName"]]+"/"+r[col["ConsumedUnit"]]] += v
				sums[r[col["SubAccountName"]]+"/cost"] += mustFloat(t, r[col["BilledCost"]])
				if r[col["ResourceId"]] == "b-old" {
					t.Errorf("Got(row of b-old, last month) = present; want only the period's rows")
				}
			}
			for _, tn := range []struct {
				slug, id string
			}{{"export-a", a.ID}, {"export-b", b.ID}} {
				tot, err := env.Usage.Totals(ctx, tn.id, usage.Range{From: month, To: month.AddDate(0, 0, 20)})
				if err != nil {
					t.Fatal(err)
				}
				for unit, want := range map[string]float64{"vCPU-Seconds": tot.VCPUSeconds(), "GiB-Seconds": tot.GiBSeconds(),
					"CPU-Seconds": tot.CPUSeconds(), "GB": tot.EgressGB(), "cost": tot.Cost.Float64()} {
					if got := sums[tn.slug+"/"+unit]; math.Abs(got-want) > 1e-6*math.Max(1, want) || want == 0 {
						t.Errorf("Got(export sum %s %s) = %v; want the ledger's %v (not 0)", tn.slug, unit, got, want)
					}
				}
			}

			var rows []map[string]any
			status, body = op.JSON(t, http.MethodGet, "/api/v1/operator/usage?"+q+"&format=json", nil, nil)
			if status != http.StatusOK {
				t.Fatalf("Got(GET operator usage json) = %d %s; want 200", status, body)
			}
			if err := json.Unmarshal([]byte(body), &rows); err != nil || len(rows) != len(recs)-1 {
				t.Fatalf("Got(json rows) = %d, %v; want %d, as many as the CSV", len(rows), err, len(recs)-1)
			}
			if cur := rows[len(rows)-1]["BillingCurrency"]; cur != "EUR" && cur != "USD" {
				t.Errorf("Got(BillingCurrency) = %v; want a currency", cur)
			}

			evs := env.Events(t, audit.TypeUsageExported)
			if len(evs) != 2 {
				t.Fatalf("Got(usage.exported events) = %d; want 2", len(evs))
			}
			if e := evs[0]; e.TenantID != "" || e.Details["scope"] != "all" || e.Details["format"] != "csv" ||
				fmt.Sprint(e.Details["rows"]) != strconv.Itoa(len(recs)-1) || e.ActorName != opEmail {
				t.Errorf("Got(audit of the csv export) = %+v; want scope all, format csv, %d rows, by %s", e, len(recs)-1, opEmail)
			}

			for _, tc := range []struct {
				name, query string
				wantField   string
			}{
				{"bad format", "format=xml", "format"},
				{"bad from", "from=yesterday", "from"},
				{"bad to", "to=2026-13-01", "to"},
				{"backwards", "from=2026-11-10&to=2026-11-01", "to"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					var p opProblem
					status, body := op.JSON(t, http.MethodGet, "/api/v1/operator/usage?"+tc.query, nil, &p)
					if status != http.StatusBadRequest || p.field() != tc.wantField {
						t.Errorf("Got(GET operator usage?%s) = %d %s; want 400 naming %s", tc.query, status, body, tc.wantField)
					}
				})
			}
			for _, role := range []tenants.Role{tenants.RoleAdmin, tenants.RoleBilling} {
				t.Run("tenant "+string(role)+" refused", func(t *testing.T) {
					c := env.WithToken(env.Token(t, a, role))
					status, body, _ := c.Request(t, http.MethodGet, "/api/v1/operator/usage?"+q, "", nil)
					if status != http.StatusForbidden || strings.Contains(body, "export-b") {
						t.Errorf("Got(GET operator usage as tenant %s) = %d %s; want 403", role, status, body)
					}
				})
			}
			if n := len(env.Events(t, audit.TypeUsageExported)); n != 2 {
				t.Errorf("Got(usage.exported events after refused exports) = %d; want still 2", n)
			}

			t.Run("page", func(t *testing.T) {
				status, page := op.GetPage(t, "/operator/usage")
				if status != http.StatusOK || !strings.Contains(page, `data-tenant="export-a"`) || !strings.Contains(page, `data-tenant="export-b"`) ||
					!strings.Contains(page, "November 2026") || !strings.Contains(page, " EUR") ||
					!strings.Contains(page, "/api/v1/operator/usage?from=2026-11-01&amp;to=2026-11-30&amp;format=csv") {
					t.Errorf("Got(GET /operator/usage) = %d; want both tenants, November 2026, EUR and the export links:\n%s", status, page)
				}
				status, page = op.GetPage(t, "/operator/usage?from=2026-10-01&to=2026-10-31")
				if status != http.StatusOK || strings.Contains(page, `data-tenant="export-a"`) || !strings.Contains(page, `data-tenant="export-b"`) {
					t.Errorf("Got(GET /operator/usage for October) = %d; want only export-b (b-old)", status)
				}
				// The page answers what the export API does for the same
				// parameter (the one error mapper decides): 400.
				status, page = op.GetPage(t, "/operator/usage?from=nope")
				if status != http.StatusBadRequest || !strings.Contains(page, "must be a date") {
					t.Errorf("Got(GET /operator/usage?from=nope) = %d; want 400 with the field's error", status)
				}
				env.Member(t, a, "admin@export-a.test", tenants.RoleAdmin)
				if status, _ := env.Login(t, "admin@export-a.test").GetPage(t, "/operator/usage"); status != http.StatusForbidden && status != http.StatusNotFound {
					t.Errorf("Got(GET /operator/usage as a tenant admin) = %d; want 403 or 404", status)
				}
			})

			t.Run("metrics", func(t *testing.T) {
				_, body, _ := env.Anonymous().Request(t, http.MethodGet, "/metrics", "", nil)
				for _, want := range []string{`stockade_tenant_month_vcpu_seconds{tenant="export-a"}`, `stockade_tenant_month_cost{currency="EUR",tenant="export-b"}`,
					`stockade_tenant_quota{quota="max_cpu_hours_monthly",tenant="export-a"} 1000`, `stockade_usage_metrics_up 1`} {
					if !strings.Contains(body, want) {
						t.Errorf("Got(/metrics) lacks %s; want the usage collector registered on the app's registry", want)
					}
				}
			})
		})
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("number %q: %v", s, err)
	}
	return v
}

// TestOperatorPrices: operators read and add price versions (platform and
// per tenant) through the API and the editor page; invalid input names the
// field; everyone else is refused; each version is audited.
func TestOperatorPrices(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{opEmail}})
	a := env.TenantNamed(t, "prices-a", "Prices A")
	env.TenantNamed(t, "prices-b", "Prices B")
	op := env.Login(t, opEmail)

	type book struct {
		Platform        map[string]any   `json:"platform"`
		PlatformHistory []map[string]any `json:"platform_history"`
		Tenants         []struct {
			Slug     string         `json:"slug"`
			Override bool           `json:"override"`
			Price    map[string]any `json:"price"`
		} `json:"tenants"`
	}
	var bk book
	if status, body := op.JSON(t, http.MethodGet, "/api/v1/prices", nil, &bk); status != 200 || bk.Platform["id"] != "default" || len(bk.Tenants) != 2 {
		t.Fatalf("Got(GET /api/v1/prices, fresh) = %d %s; want the default list price and 2 tenants", status, body)
	}

	price := func(extra map[string]any) map[string]any {
		m := map[string]any{"currency": "USD", "vcpu_second": 0.00002, "gib_second": 0.000005, "cpu_second": 0, "egress_gb": 0.09}
		for k, v := range extra {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name      string
		in        map[string]any
		wantCode  int
		wantField string
	}{
		{"platform", price(nil), 201, ""},
		{"tenant override from now", price(map[string]any{"tenant_id": a.ID, "currency": "EUR"}), 201, ""},
		{"back-dated", price(map[string]any{"tenant_id": a.ID, "currency": "EUR", "effective_from": "2020-01-01T00:00:00Z"}), 422, "effective_from"},
		{"below a nano-unit", price(map[string]any{"gib_second": 0.0000000001}), 422, "gib_second"},
		{"bad currency", price(map[string]any{"currency": "dollars"}), 422, "currency"},
		{"negative", price(map[string]any{"egress_gb": -1}), 422, "egress_gb"},
		{"negative volume price", price(map[string]any{"volume_gib_month": -0.1}), 422, "volume_gib_month"},
		{"volume price not a number", price(map[string]any{"volume_gib_month": "cheap"}), 400, "volume_gib_month"},
		{"slipped decimal point", price(map[string]any{"vcpu_second": 14000}), 422, "vcpu_second"},
		{"missing price", price(map[string]any{"gib_second": nil}), 422, "gib_second"},
		{"bad date", price(map[string]any{"effective_from": "tomorrow"}), 422, "effective_from"},
		{"wrong type", price(map[string]any{"vcpu_second": "cheap"}), 400, "vcpu_second"},
		{"unknown tenant", price(map[string]any{"tenant_id": "no-such-tenant"}), 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p opProblem
			status, body := op.JSON(t, http.MethodPost, "/api/v1/prices", tc.in, &p)
			if status != tc.wantCode || (tc.wantField != "" && p.field() != tc.wantField) {
				t.Errorf("Got(POST /api/v1/prices %v) = %d %s; want %d naming %q", tc.in, status, body, tc.wantCode, tc.wantField)
			}
		})
	}
	if n := len(env.Events(t, audit.TypePriceSet)); n != 2 {
		t.Errorf("Got(usage.price_set events) = %d; want 2, one per version saved", n)
	}
	bk = book{}
	op.JSON(t, http.MethodGet, "/api/v1/prices", nil, &bk)
	if bk.Platform["vcpu_second"] != 0.00002 || len(bk.PlatformHistory) != 1 {
		t.Errorf("Got(platform price) = %v, history %d; want the version set and one version", bk.Platform, len(bk.PlatformHistory))
	}
	// Omitted, the volume storage price is the one in force (the default's).
	if want := usage.DefaultPrice().VolumeGiBMonth; bk.Platform["volume_gib_month"] != want {
		t.Errorf("Got(platform volume_gib_month) = %v; want %v kept from the price in force", bk.Platform["volume_gib_month"], want)
	}
	for _, tp := range bk.Tenants {
		want := tp.Slug == "prices-a"
		if tp.Override != want || (want && tp.Price["currency"] != "EUR") || (!want && tp.Price["currency"] != "USD") {
			t.Errorf("Got(price of %s) = override %v %v; want override %v", tp.Slug, tp.Override, tp.Price, want)
		}
	}

	t.Run("refused to tenants", func(t *testing.T) {
		for _, role := range []tenants.Role{tenants.RoleAdmin, tenants.RoleBilling} {
			c := env.WithToken(env.Token(t, a, role))
			if status, body := c.JSON(t, http.MethodPost, "/api/v1/prices", price(nil), nil); status != http.StatusForbidden {
				t.Errorf("Got(POST /api/v1/prices as %s) = %d %s; want 403", role, status, body)
			}
			if status, _ := c.JSON(t, http.MethodGet, "/api/v1/prices", nil, nil); status != http.StatusForbidden {
				t.Errorf("Got(GET /api/v1/prices as %s) = %d; want 403", role, status)
			}
		}
	})

	t.Run("editor", func(t *testing.T) {
		status, page := op.GetPage(t, "/operator/prices?tenant=prices-a")
		if status != 200 || !strings.Contains(page, `id="platform-history"`) || !strings.Contains(page, `id="tenant-history"`) ||
			!strings.Contains(page, "own price") || !strings.Contains(page, "0.00002") {
			t.Fatalf("Got(GET /operator/prices?tenant=prices-a) = %d; want both histories and the override:\n%s", status, page)
		}
		form := url.Values{"currency": {"usd"}, "vcpu_second": {"0.00003"}, "gib_second": {"0.000006"}, "cpu_second": {"0"}, "egress_gb": {"abc"}}
		status, page, _ = op.Post(t, "/operator/prices", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(page, "must be a number") || !strings.Contains(page, `aria-invalid="true"`) {
			t.Errorf("Got(POST /operator/prices with egress abc) = %d; want 422 naming the field:\n%s", status, page)
		}
		form.Set("egress_gb", "0.08")
		form.Set("effective_from", "2020-01-01T00:00")
		status, page, _ = op.Post(t, "/operator/prices", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(page, "must be now or later") || !strings.Contains(page, `aria-invalid="true"`) {
			t.Errorf("Got(POST /operator/prices from 2020) = %d; want 422 saying the start must be now or later:\n%s", status, page)
		}
		form.Set("effective_from", "2030-01-01T00:00")
		status, _, hdr := op.Post(t, "/operator/prices", form)
		if status != http.StatusSeeOther || hdr.Get("Location") != "/operator/prices" {
			t.Fatalf("Got(POST /operator/prices) = %d %s; want 303 to /operator/prices", status, hdr.Get("Location"))
		}
		_, page = op.GetPage(t, "/operator/prices")
		if !strings.Contains(page, "scheduled") || !strings.Contains(page, "0.00003") {
			t.Errorf("Got(price editor after a future version) = lacks it; want it listed as scheduled")
		}
		form = url.Values{"tenant": {"prices-b"}, "currency": {"GBP"}, "vcpu_second": {"0.1"}, "gib_second": {"0"}, "cpu_second": {"0"}, "egress_gb": {"0"}}
		status, _, hdr = op.Post(t, "/operator/prices", form)
		if status != http.StatusSeeOther || hdr.Get("Location") != "/operator/prices?tenant=prices-b" {
			t.Fatalf("Got(POST /operator/prices for prices-b) = %d %s; want 303 back to its page", status, hdr.Get("Location"))
		}
		pb, err := env.Store.TenantBySlug(context.Background(), "prices-b")
		if err != nil {
			t.Fatal(err)
		}
		if hist, _ := env.Usage.PriceHistory(context.Background(), pb.ID); len(hist) != 1 || hist[0].Currency != "GBP" {
			t.Errorf("Got(prices-b history) = %+v; want one GBP version", hist)
		}
		if n := len(env.Events(t, audit.TypePriceSet)); n != 4 {
			t.Errorf("Got(usage.price_set events) = %d; want 4", n)
		}
	})
}

// TestOperatorQuota: operators read and replace a tenant's quota through
// the API and the tenant page's forms; out-of-range and missing limits name
// the field; an unknown tenant is 404; tenants' roles get 403.
func TestOperatorQuota(t *testing.T) {
	env := webtest.New(t, webtest.Options{Operators: []string{opEmail}})
	a := env.TenantNamed(t, "quota-a", "Quota A")
	op := env.Login(t, opEmail)
	var q map[string]any
	if status, body := op.JSON(t, http.MethodGet, "/api/v1/tenants/"+a.ID+"/quota", nil, &q); status != 200 ||
		q["max_cpu_hours_monthly"] != float64(tenants.DefaultQuota().MaxCPUHoursMonthly) {
		t.Fatalf("Got(GET quota) = %d %s; want 200 with the defaults", status, body)
	}
	full := map[string]any{"max_vms": 2, "max_vcpus": 6, "max_memory_mib": 4096, "max_sandboxes": 5, "max_cpu_hours_monthly": 40}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range full {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name      string
		path      string
		in        map[string]any
		wantCode  int
		wantField string
	}{
		{"saved", "/api/v1/tenants/" + a.ID + "/quota", full, 200, ""},
		{"negative", "/api/v1/tenants/" + a.ID + "/quota", with("max_vcpus", -1), 422, "max_vcpus"},
		{"too large", "/api/v1/tenants/" + a.ID + "/quota", with("max_cpu_hours_monthly", 1e9), 422, "max_cpu_hours_monthly"},
		{"missing", "/api/v1/tenants/" + a.ID + "/quota", with("max_sandboxes", nil), 422, "max_sandboxes"},
		{"not a number", "/api/v1/tenants/" + a.ID + "/quota", with("max_vms", "two"), 400, "max_vms"},
		{"unknown tenant", "/api/v1/tenants/nope/quota", full, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p opProblem
			status, body := op.JSON(t, http.MethodPut, tc.path, tc.in, &p)
			if status != tc.wantCode || (tc.wantField != "" && p.field() != tc.wantField) {
				t.Errorf("Got(PUT %s %v) = %d %s; want %d naming %q", tc.path, tc.in, status, body, tc.wantCode, tc.wantField)
			}
		})
	}
	got, err := env.Store.Quota(context.Background(), a.ID)
	if err != nil || got.MaxCPUHoursMonthly != 40 || got.MaxVCPUs != 6 {
		t.Errorf("Got(stored quota) = %+v, %v; want the saved one (40 CPU-hours, 6 vCPUs)", got, err)
	}
	if n := len(env.Events(t, audit.TypeQuotaUpdated)); n != 1 {
		t.Errorf("Got(quota_updated events) = %d; want 1", n)
	}
	c := env.WithToken(env.Token(t, a, tenants.RoleAdmin))
	if status, _ := c.JSON(t, http.MethodPut, "/api/v1/tenants/"+a.ID+"/quota", full, nil); status != http.StatusForbidden {
		t.Errorf("Got(PUT quota as the tenant's admin) = %d; want 403", status)
	}

	t.Run("form", func(t *testing.T) {
		status, page := op.GetPage(t, "/operator/tenants")
		if status != 200 || !strings.Contains(page, `id="quota-quota-a"`) || !strings.Contains(page, `value="40"`) {
			t.Fatalf("Got(GET /operator/tenants) = %d; want quota-a's quota form with its values:\n%s", status, page)
		}
		form := url.Values{"max_vms": {"3"}, "max_vcpus": {"8"}, "max_memory_mib": {"8192"}, "max_sandboxes": {"x"}, "max_cpu_hours_monthly": {"50"}}
		status, page, _ = op.Post(t, "/operator/tenants/"+a.ID+"/quota", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(page, "must be a whole number") || !strings.Contains(page, `value="x"`) {
			t.Errorf("Got(POST quota form with sandboxes x) = %d; want 422 keeping the input:\n%s", status, page)
		}
		form.Set("max_sandboxes", "9")
		status, _, hdr := op.Post(t, "/operator/tenants/"+a.ID+"/quota", form)
		if status != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/operator/tenants") {
			t.Fatalf("Got(POST quota form) = %d %s; want 303 to /operator/tenants", status, hdr.Get("Location"))
		}
		if got, _ := env.Store.Quota(context.Background(), a.ID); got.MaxSandboxes != 9 || got.MaxCPUHoursMonthly != 50 {
			t.Errorf("Got(quota after the form) = %+v; want 9 sandboxes, 50 CPU-hours", got)
		}
		// max_volume_gib: set from the form, kept when left empty, refused when not a number.
		before, _ := env.Store.Quota(context.Background(), a.ID)
		form.Set("max_volume_gib", "33")
		if status, _, _ := op.Post(t, "/operator/tenants/"+a.ID+"/quota", form); status != http.StatusSeeOther {
			t.Fatalf("Got(POST quota form with max_volume_gib 33) = %d; want 303", status)
		}
		if got, _ := env.Store.Quota(context.Background(), a.ID); got.MaxVolumeGiB != 33 || got.MaxTemplateMiB != before.MaxTemplateMiB {
			t.Errorf("Got(quota after max_volume_gib 33) = %+v; want 33 GiB of volumes, templates unchanged (%d)", got, before.MaxTemplateMiB)
		}
		form.Set("max_volume_gib", "")
		form.Set("max_vms", "4")
		if status, _, _ := op.Post(t, "/operator/tenants/"+a.ID+"/quota", form); status != http.StatusSeeOther {
			t.Fatalf("Got(POST quota form with max_volume_gib empty) = %d; want 303", status)
		}
		if got, _ := env.Store.Quota(context.Background(), a.ID); got.MaxVolumeGiB != 33 || got.MaxVMs != 4 {
			t.Errorf("Got(quota after max_volume_gib empty) = %+v; want 33 GiB of volumes kept, 4 VMs", got)
		}
		form.Set("max_volume_gib", "lots")
		status, page, _ = op.Post(t, "/operator/tenants/"+a.ID+"/quota", form)
		if status != http.StatusUnprocessableEntity || !strings.Contains(page, `value="lots"`) {
			t.Errorf("Got(POST quota form with max_volume_gib lots) = %d; want 422 keeping the input:\n%s", status, page)
		}
		status, page = op.GetPage(t, "/operator/tenants")
		if status != 200 || !strings.Contains(page, `name="max_volume_gib"`) || !strings.Contains(page, `value="33"`) {
			t.Errorf("Got(GET /operator/tenants) = %d; want the max_volume_gib field holding 33", status)
		}
	})
}

// TestOperatorUsageBrowser renders /operator/usage and /operator/prices in
// headless Chromium with data and saves screenshots; console errors and
// CSP reports fail it.
func TestOperatorUsageBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	now := time.Now().UTC()
	env := webtest.New(t, webtest.Options{Operators: []string{opEmail}})
	month := usage.MonthStart(now)
	// Prices set at the start of the month, before the usage they price.
	opPriceFrom(t, env.DB, usage.Price{Currency: "USD", VCPUSecond: 0.000014, GiBSecond: 0.0000045, EgressGB: 0.05, EffectiveFrom: month})
	for i, slug := range []string{"acme-corp", "globex", "initech", "umbrella"} {
		tn := env.TenantNamed(t, slug, strings.ToUpper(slug[:1])+slug[1:])
		if slug == "globex" {
			opPriceFrom(t, env.DB, usage.Price{TenantID: tn.ID, Currency: "EUR", VCPUSecond: 0.00001, GiBSecond: 0.000004,
				EgressGB: 0.04, EffectiveFrom: month})
		}
		for j := range i + 2 {
			opMeter(t, env.DB, tn.ID, fmt.Sprintf("%s-%d", slug, j), 1+i, 512*(i+1), month.Add(time.Duration(j*5+i)*time.Hour),
				time.Duration(30+20*i)*time.Minute, time.Duration(10+i*40)*time.Second, int64(i+1)*3e8)
		}
	}
	css := webtest.CSS
	b.Do(t, "sign in", chromedp.Navigate(env.URL+"/login/start?return_to=/operator/usage"), chromedp.WaitVisible(css(`input[name="email"]`)),
		chromedp.SendKeys(css(`input[name="email"]`), opEmail), chromedp.Click(css(`button[value="login"]`)),
		chromedp.WaitVisible(css(`#operator-usage`)))
	rows, err := chromedp.Run(b.Ctx, chromedp.Text(css(`#operator-usage tbody`)))
	if err != nil || !strings.Contains(rows, "acme-corp") || !strings.Contains(rows, "EUR") {
		t.Errorf("Got(usage table) = %q, %v; want every tenant with its currency", rows, err)
	}
	b.Screenshot(t, artifacts, "operator-usage.png")
	b.Do(t, "prices", chromedp.Navigate(env.URL+"/operator/prices?tenant=globex"), chromedp.WaitVisible(css(`#tenant-history`)))
	b.Screenshot(t, artifacts, "operator-prices.png")
	b.Do(t, "tenants", chromedp.Navigate(env.URL+"/operator/tenants"), chromedp.WaitVisible(css(`#quota-acme-corp`)))
	b.Screenshot(t, artifacts, "operator-tenants-quotas.png")
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("Got(console problems) = %v; want none", p)
	}
}
