package views

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func TestNiceMax(t *testing.T) {
	tests := []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.37, 0.4}, {0.8, 0.8}, {0.81, 1}, {3.2, 4}, {9, 10}, {11, 20}, {0.00061, 0.0008},
	}
	for _, tc := range tests {
		if got := niceMax(tc.in); got < tc.in || (tc.in > 0 && got > 2.5*tc.in+1e-12) || !usageNear(got, tc.want) {
			t.Errorf("Got(niceMax(%v)) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

func usageNear(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

func TestMoney(t *testing.T) {
	tests := []struct {
		v        float64
		currency string
		want     string
	}{
		{0, "USD", "$0.00"}, {12.345, "USD", "$12.35"}, {0.01234, "USD", "$0.0123"}, {1, "EUR", "€1.00"}, {2.5, "CHF", "2.50 CHF"},
	}
	for _, tc := range tests {
		if got := money(Amount{Value: tc.v}, tc.currency); got != tc.want {
			t.Errorf("Got(money(%v, %s)) = %q; want %q", tc.v, tc.currency, got, tc.want)
		}
	}
	// The exact cost's own rounding wins over the float's (0.01235 is
	// 0.012349999... as a float).
	if got := money(Amount{Value: 0.01235, Cents: "0.01", Fine: "0.0124"}, "USD"); got != "$0.0124" {
		t.Errorf("Got(money of exact 0.01235) = %q; want $0.0124", got)
	}
	if got := opMoney(Amount{Value: 12.345, Cents: "12.35", Fine: "12.3450"}, "EUR"); got != "12.35 EUR" {
		t.Errorf("Got(opMoney of exact 12.345) = %q; want 12.35 EUR", got)
	}
	if got := stepDecimals(0.2); got != 2 {
		t.Errorf("Got(stepDecimals(0.2)) = %d; want 2", got)
	}
	if got := stepDecimals(0.0025); got != 4 {
		t.Errorf("Got(stepDecimals(0.0025)) = %d; want 4", got)
	}
}

func TestDailyChart(t *testing.T) {
	start := sampleTime("2026-11-01T00:00:00Z")
	var days []UsageDay
	for i, cost := range []float64{0, 1, 3, 0.5} {
		days = append(days, UsageDay{Day: start.AddDate(0, 0, i), UsageTotals: UsageTotals{Cost: Amount{Value: cost}, Currency: "USD"}})
	}
	c := dailyChart(days, "USD")
	if len(c.Bars) != 4 {
		t.Fatalf("Got(bars) = %d; want 4", len(c.Bars))
	}
	// 3 is the largest: the axis tops at 4, so its bar is 3/4 of the plot.
	if !usageNear(c.Bars[2].H, chartPlotH*0.75) || c.Bars[0].H != 0 || !usageNear(c.Bars[1].H*3, c.Bars[2].H) {
		t.Errorf("Got(bar heights) = %v %v %v; want 0, 1/3 of the third, 3/4 of %v", c.Bars[0].H, c.Bars[1].H, c.Bars[2].H, chartPlotH)
	}
	for i, b := range c.Bars {
		if !usageNear(b.Y+b.H, chartPlotBottom) || b.X < chartLeft || b.X+b.W > chartPlotRight+1e-9 {
			t.Errorf("Got(bar %d) = %+v; want it standing on the axis inside the plot", i, b)
		}
	}
	if c.Bars[2].Title != "2026-11-03: $3.00, 0.00 vCPU-hours, 0.00 CPU-hours" {
		t.Errorf("Got(bar title) = %q", c.Bars[2].Title)
	}
	if len(c.YTicks) != chartTicks+1 || c.YTicks[chartTicks].Text != "$4.00" || c.YTicks[0].Text != "$0.00" {
		t.Errorf("Got(y ticks) = %+v; want $0.00 to $4.00", c.YTicks)
	}
}

func TestLineChart(t *testing.T) {
	t0 := sampleTime("2026-11-03T08:00:00Z")
	pts := []UsagePoint{{t0, 0}, {t0.Add(time.Minute), 2}, {t0.Add(2 * time.Minute), 1}}
	c := lineChart(pts, "vCPUs")
	want := "64.0,192.0 386.0,14.0 708.0,103.0"
	if c.Points != want {
		t.Errorf("Got(points) = %q; want %q", c.Points, want)
	}
	if len(c.XLabels) != 3 || c.XLabels[0].Anchor != "start" || c.XLabels[2].Anchor != "end" || c.XLabels[1].Text != "08:01" {
		t.Errorf("Got(x labels) = %+v; want 08:00 start, 08:01 middle, 08:02 end", c.XLabels)
	}
	if got := lineChart(nil, "MiB"); got.Points != "" || len(got.YTicks) != 0 {
		t.Errorf("Got(empty chart) = %+v; want nothing", got)
	}
}

func TestUsagePage(t *testing.T) {
	start := sampleTime("2026-11-01T00:00:00Z")
	v := UsageView{PeriodLabel: "November 2026", From: "2026-11-01", To: "2026-11-30", PrevURL: "/usage?p", NextURL: "/usage?n", ThisMonthURL: "/usage?t",
		Totals: UsageTotals{Cost: Amount{Value: 1.5}, Currency: "USD", VCPUHours: 10}, Sandboxes: 1,
		Days:         []UsageDay{{Day: start, UsageTotals: UsageTotals{Cost: Amount{Value: 1.5}, Currency: "USD"}}, {Day: start.AddDate(0, 0, 1)}},
		TopSandboxes: []UsageLine{{Key: "sb-1", Label: "sb-1 · <busybox>", Href: "/usage/sandboxes/sb-1", UsageTotals: UsageTotals{Cost: Amount{Value: 1.5}, Currency: "USD"}}},
		Quota: []QuotaLineView{{Name: "max_vcpus", Label: "vCPUs", Used: 7, Limit: 8, Share: 7.0 / 8, Warn: true},
			{Name: "max_vms", Label: "VMs", Used: 1, Limit: 4, Share: 0.25}}}
	page := func(v UsageView) *html.Node { return parse(t, render(t, Usage(samplePageModel("Usage", NavUsage), v))) }
	doc := page(v)
	chart := byID(doc, "usage-chart")
	if chart == nil || chart.Data != "svg" {
		t.Fatal("Got(no <svg id=usage-chart>); want the daily chart")
	}
	if got := text(byID(chart, "usage-chart-title")); got != "Cost per day, November 2026" {
		t.Errorf("Got(chart title) = %q; want Cost per day, November 2026", got)
	}
	var barTitles []string
	for _, r := range all(chart, withAttr("class", "bar")) {
		for _, ti := range all(r, tag("title")) {
			barTitles = append(barTitles, text(ti))
		}
	}
	if len(barTitles) != 2 || !strings.HasPrefix(barTitles[0], "2026-11-01: $1.50") {
		t.Errorf("Got(bar titles) = %q; want one a day, the first 2026-11-01: $1.50", barTitles)
	}
	if byID(doc, "usage-daily") == nil {
		t.Error("Got(no #usage-daily); want the table of days")
	}
	links := all(doc, withAttr("href", "/usage/sandboxes/sb-1"))
	if len(links) != 1 || text(links[0]) != "sb-1 · <busybox>" {
		t.Errorf("Got(%d links to sb-1's usage); want one reading %q", len(links), "sb-1 · <busybox>")
	}
	if w := all(doc, withAttr("data-quota-warning", "max_vcpus")); len(w) != 1 || !strings.Contains(text(w[0]), "87 %") {
		t.Errorf("Got(%d max_vcpus warnings); want one at 87 %%", len(w))
	}
	if w := all(doc, withAttr("data-quota-warning", "max_vms")); len(w) != 0 {
		t.Errorf("Got(usage page) warns of max_vms at 25 %%; want no warning below 80 %%")
	}
	if byID(doc, "usage-export") != nil {
		t.Errorf("Got(usage page without CanExport) has the export form")
	}
	v.CanExport = true
	if f := byID(page(v), "usage-export"); f == nil {
		t.Errorf("Got(usage page with CanExport) lacks the export form")
	} else if a, _ := attr(f, "action"); a != "/api/v1/usage" {
		t.Errorf("Got(export form action) = %q; want /api/v1/usage", a)
	}
}
