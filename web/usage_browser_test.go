package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestUsageBrowser renders the usage page (a month of metered sandboxes)
// and one sandbox's usage page in headless Chromium, as billing, and saves
// screenshots to test-artifacts/. The chart must draw a bar per day and
// the page must raise no console error, exception or CSP violation.
func TestUsageBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, acme, "bill@example.com", tenants.RoleBilling)
	month := usage.MonthStart(time.Now())
	days := int(month.AddDate(0, 1, 0).Sub(month).Hours() / 24)
	people := []struct{ id, name string }{{"u-ada", "ada@example.com"}, {"u-grace", "grace@example.com"}, {"u-ci", "nightly-evals (stk_7fq2)"}}
	templates := []string{"debian", "busybox", "debian"}
	var detail string
	for d := 0; d < days; d++ {
		for i := 0; i < 1+(d*7)%3; i++ {
			sb := sandboxtest.RecordState(t, env.DB, acme.ID, people[(d+i)%3].name, sandbox.StateDestroyed)
			r := webtest.Run{TenantID: acme.ID, SandboxID: sb.ID, Template: templates[(d+i)%3], UserID: people[(d+i)%3].id,
				UserName: people[(d+i)%3].name, VCPUs: 1 + (d+i)%2, MemoryMiB: 512 << ((d + i) % 3),
				Start: month.Add(time.Duration(d)*24*time.Hour + time.Duration(8+i*3)*time.Hour), For: time.Duration(20+(d*37+i*53)%160) * time.Minute,
				Cores: 0.2 + float64((d+i)%5)/10, UsedMiB: 120, GrowMiB: 200, EgressUp: int64(d+1) * 1_500_000, EgressDown: int64(i+1) * 9_000_000,
				Every: 10 * time.Minute}
			if d == 2 && i == 0 {
				// The one shown in detail: an afternoon of work, sampled every
				// minute, busy in waves.
				r.For, r.Every, r.Cores, r.Wave, r.GrowMiB = 3*time.Hour+10*time.Minute, time.Minute, 0.9, 0.7, 900
				detail = sb.ID
			}
			webtest.Meter(t, env.DB, r)
		}
	}
	css := webtest.CSS
	b.Login(t, env.URL+"/usage", "bill@example.com", `#usage-chart`)
	bars, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelectorAll("#usage-chart rect.bar").length`))
	if err != nil || bars != days {
		t.Errorf("Got(bars in the chart) = %d, %v; want one per day, %d", bars, err, days)
	}
	titles, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`document.querySelector("#usage-chart rect.bar title").textContent`))
	if err != nil || !strings.HasPrefix(titles, month.Format(time.DateOnly)+": $") {
		t.Errorf("Got(first bar's title) = %q, %v; want the day and its cost", titles, err)
	}
	if _, err := chromedp.Run(b.Ctx, chromedp.Text(css(`#usage-export button`))); err != nil {
		t.Errorf("Got(export form for billing) = %v; want it", err)
	}
	b.Screenshot(t, artifacts, "usage.png")

	b.Do(t, "sandbox usage", chromedp.Navigate(env.URL+"/usage/sandboxes/"+detail), chromedp.WaitVisible(css(`#sandbox-cpu-chart`)))
	pts, err := chromedp.Run(b.Ctx, chromedp.Evaluate[int](`document.querySelector("#sandbox-cpu-chart polyline").points.numberOfItems`))
	if err != nil || pts < 150 {
		t.Errorf("Got(points of the CPU line) = %d, %v; want one per sample (about 190)", pts, err)
	}
	b.Screenshot(t, artifacts, "usage-sandbox.png")

	// At 80 % of the monthly CPU-hours the dashboard warns.
	cpuHours := 0.0
	if err := env.DB.Raw("SELECT COALESCE(SUM(cpu_ns), 0) / 3.6e12 FROM usage_ledger WHERE tenant_id = ?", acme.ID).Row().Scan(&cpuHours); err != nil {
		t.Fatal(err)
	}
	q := tenants.DefaultQuota()
	q.MaxCPUHoursMonthly = int(cpuHours/0.85) + 1
	if _, err := env.Store.SetQuota(t.Context(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, acme.ID, q); err != nil {
		t.Fatal(err)
	}
	b.Do(t, "dashboard", chromedp.Navigate(env.URL+"/"), chromedp.WaitVisible(css(`[data-quota-warning="max_cpu_hours_monthly"]`)))
	b.Screenshot(t, artifacts, "usage-dashboard-warning.png")

	// The usage page on a phone.
	b.Do(t, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(env.URL+"/usage"), chromedp.WaitVisible(css(`#usage-chart`)))
	b.Screenshot(t, artifacts, "usage-phone.png")
	b.Do(t, "desktop", chromedp.ResetViewport())

	for _, p := range b.Problems() {
		t.Errorf("Got(console) %s; want no errors, exceptions or CSP violations", p)
	}
}
