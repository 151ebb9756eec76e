package views

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// UsageView is the tenant's usage page for one period.
type UsageView struct {
	// PeriodLabel names the period in words ("November 2026").
	PeriodLabel string
	// From and To are the period's first and last day (To inclusive), as
	// the date inputs show them.
	From, To string
	// Errors are the period's fields that could not be read ("from",
	// "to"), shown next to them; the figures are then this month's.
	Errors map[string]string
	// PrevURL and NextURL are the months before and after the period's
	// first month; ThisMonthURL the current month.
	PrevURL, NextURL, ThisMonthURL string
	Totals                         UsageTotals
	// Sandboxes is how many sandboxes used anything in the period.
	Sandboxes int
	Days      []UsageDay
	// TopSandboxes, TopUsers and TopTemplates are the costliest first.
	TopSandboxes, TopUsers, TopTemplates []UsageLine
	Quota                                []QuotaLineView
	// Volumes is the volume storage of the period, costliest first.
	Volumes []UsageVolume
	// CanExport shows the export form (usage.export).
	CanExport bool
}

// UsageTotals are usage quantities with their cost.
type UsageTotals struct {
	Cost     Amount
	Currency string
	// VCPUHours and GiBHours are what sandboxes held; CPUHours what their
	// cgroups measured.
	VCPUHours, GiBHours, CPUHours, WallHours float64
	EgressBytes                              int64
	MemoryPeakBytes                          int64
}

// UsageDay is one UTC day of the tenant's usage.
type UsageDay struct {
	Day time.Time
	UsageTotals
}

// UsageLine is one sandbox, user or template of a top list.
type UsageLine struct {
	Key   string // sandbox id, user id or template name
	Label string
	Href  string // "" for no link
	UsageTotals
}

// UsageVolume is one volume's storage over the period.
type UsageVolume struct {
	Name      string
	SizeGiB   int
	GiBMonths string
	Cost      Amount
	Currency  string
}

// QuotaLineView is one quota with what the tenant holds or used of it.
type QuotaLineView struct {
	Name        string
	Label       string
	Used, Limit float64
	Share       float64 // Used/Limit
	Warn, Over  bool
}

// SandboxUsageView is one sandbox's usage: its ledger hours, totals and
// charts of its samples.
type SandboxUsageView struct {
	ID                string
	SandboxHref       string // the sandbox's page; empty when the caller may not open it
	Template          string
	User              string
	State             string
	VCPUs, MemoryMiB  int
	StartedAt, Closed *time.Time
	// Metered is false for a sandbox that never ran.
	Metered bool
	Totals  UsageTotals
	Hours   []UsageHour
	// CPU is the vCPUs used between samples; Memory the MiB in use.
	CPU, Memory []UsagePoint
}

// UsageHour is one ledger hour of a sandbox.
type UsageHour struct {
	Start time.Time
	UsageTotals
}

// UsagePoint is one value of a chart over time.
type UsagePoint struct {
	At    time.Time
	Value float64
}

// Quota warnings: the lines at or over the warning share.
func quotaWarnings(lines []QuotaLineView) []QuotaLineView {
	var out []QuotaLineView
	for _, l := range lines {
		if l.Warn || l.Over {
			out = append(out, l)
		}
	}
	return out
}

// quotaNumber shows a quota figure: whole numbers plainly, hours with two
// decimals.
func quotaNumber(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func quotaPercent(l QuotaLineView) string {
	return strconv.Itoa(int(math.Floor(l.Share*100))) + " %"
}

func quotaText(l QuotaLineView) string {
	return fmt.Sprintf("%s: %s of %s (%s)", l.Label, quotaNumber(l.Used), quotaNumber(l.Limit), quotaPercent(l))
}

func quotaPill(l QuotaLineView) string {
	switch {
	case l.Over:
		return pill("fail")
	case l.Warn:
		return pill("warn")
	}
	return pill("ok")
}

func quotaState(l QuotaLineView) string {
	switch {
	case l.Over:
		return "at the limit"
	case l.Warn:
		return "over 80 %"
	}
	return "ok"
}

// Amount is a cost as pages show it: its value (for charts and the choice
// of precision) and the exact cost rounded half up to 2 and to 4 decimals,
// which the handler makes from the exact figure, so a page shows what the
// export's rows add up to. Without them the value is rounded.
type Amount struct {
	Value       float64
	Cents, Fine string
}

// text is a rounded to prec (2 or 4) decimals.
func (a Amount) text(prec int) string {
	switch {
	case prec == 2 && a.Cents != "":
		return a.Cents
	case prec == 4 && a.Fine != "":
		return a.Fine
	}
	return strconv.FormatFloat(a.Value, 'f', prec, 64)
}

// money shows an amount in its currency: cents for sums of a dollar or
// more, four decimals below (a sandbox-hour costs fractions of a cent).
func money(a Amount, currency string) string {
	prec := 2
	if a.Value != 0 && math.Abs(a.Value) < 0.995 {
		prec = 4
	}
	return moneyText(a.text(prec), currency)
}

// stepDecimals is how many decimals (2 to 6) show an axis step exactly.
func stepDecimals(step float64) int {
	for d := 2; d < 6; d++ {
		x := step * math.Pow(10, float64(d))
		if math.Abs(x-math.Round(x)) < 1e-6 {
			return d
		}
	}
	return 6
}

func moneyPrec(v float64, currency string, prec int) string {
	return moneyText(strconv.FormatFloat(v, 'f', prec, 64), currency)
}

// moneyText puts the currency to a figure.
func moneyText(s, currency string) string {
	switch currency {
	case "USD":
		return "$" + s
	case "EUR":
		return "€" + s
	case "GBP":
		return "£" + s
	case "":
		return s
	}
	return s + " " + currency
}

func hours(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func usageBytes(n int64) string { return showBytes(uint64(max(n, 0))) }

func usageSandboxURL(id string) string { return "/usage/sandboxes/" + id }

func usageDay(t time.Time) string { return t.UTC().Format("2006-01-02") }

// Charts are server-rendered SVG: a fixed coordinate system scaled by CSS.
const (
	chartW, chartH                  = 720.0, 220.0
	chartLeft, chartRight           = 64.0, 12.0
	chartTop, chartBottom           = 14.0, 28.0
	chartPlotW, chartPlotH          = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
	chartTicks                      = 4
	chartViewBox                    = "0 0 720 220"
	chartBarGap                     = 0.2 // share of a slot left empty
	chartMaxXLabels                 = 8
	chartTickX, chartXLabelY        = chartLeft - 6, chartH - 8
	chartPlotBottom, chartPlotRight = chartTop + chartPlotH, chartLeft + chartPlotW
)

// chart is the geometry of one SVG chart.
type chart struct {
	Bars    []chartBar
	Points  string // polyline points of a line chart
	Dots    []chartBar
	YTicks  []chartTick
	XLabels []chartTick
}

type chartBar struct {
	X, Y, W, H float64
	Title      string // what a pointer or a screen reader gets
}

type chartTick struct {
	Pos    float64
	Text   string
	Anchor string // text-anchor of an x label: start, middle or end
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// niceMax is the smallest of 1, 2, 2.5, 5 x 10^k times chartTicks that holds
// v, so the axis reads in round steps.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	raw := v / chartTicks
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step := m * mag; step*chartTicks >= v*(1-1e-12) {
			return step * chartTicks
		}
	}
	return 10 * mag * chartTicks
}

func yTicks(top float64, label func(float64) string) []chartTick {
	out := make([]chartTick, 0, chartTicks+1)
	for i := 0; i <= chartTicks; i++ {
		v := top * float64(i) / chartTicks
		out = append(out, chartTick{Pos: chartPlotBottom - chartPlotH*float64(i)/chartTicks, Text: label(v)})
	}
	return out
}

// dailyChart is the bar chart of the cost of each day.
func dailyChart(days []UsageDay, currency string) chart {
	var c chart
	if len(days) == 0 {
		return c
	}
	top := 0.0
	for _, d := range days {
		top = max(top, d.Cost.Value)
	}
	top = niceMax(top)
	prec := stepDecimals(top / chartTicks)
	c.YTicks = yTicks(top, func(v float64) string { return moneyPrec(v, currency, prec) })
	slot := chartPlotW / float64(len(days))
	every := (len(days) + chartMaxXLabels - 1) / chartMaxXLabels
	for i, d := range days {
		h := chartPlotH * d.Cost.Value / top
		x := chartLeft + slot*float64(i)
		c.Bars = append(c.Bars, chartBar{X: x + slot*chartBarGap/2, Y: chartPlotBottom - h, W: slot * (1 - chartBarGap), H: h,
			Title: fmt.Sprintf("%s: %s, %s vCPU-hours, %s CPU-hours", usageDay(d.Day), money(d.Cost, currency), hours(d.VCPUHours), hours(d.CPUHours))})
		if i%every == 0 {
			c.XLabels = append(c.XLabels, chartTick{Pos: x + slot/2, Text: d.Day.UTC().Format("Jan 2"), Anchor: "middle"})
		}
	}
	return c
}

// lineChart plots points over time; unit names the value in the titles.
func lineChart(points []UsagePoint, unit string) chart {
	var c chart
	if len(points) == 0 {
		return c
	}
	top := 0.0
	for _, p := range points {
		top = max(top, p.Value)
	}
	top = niceMax(top)
	c.YTicks = yTicks(top, func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) })
	first, last := points[0].At, points[len(points)-1].At
	span := last.Sub(first)
	xOf := func(t time.Time) float64 {
		if span <= 0 {
			return chartLeft + chartPlotW/2
		}
		return chartLeft + chartPlotW*float64(t.Sub(first))/float64(span)
	}
	var b strings.Builder
	for i, p := range points {
		x, y := xOf(p.At), chartPlotBottom-chartPlotH*p.Value/top
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f1(x) + "," + f1(y))
		c.Dots = append(c.Dots, chartBar{X: x, Y: y, Title: fmt.Sprintf("%s: %s %s", p.At.UTC().Format("15:04:05"),
			strconv.FormatFloat(p.Value, 'f', 2, 64), unit)})
	}
	c.Points = b.String()
	layout := "15:04"
	if span > 24*time.Hour {
		layout = "Jan 2 15:04"
	}
	n := min(len(points), 5)
	for i := 0; i < n; i++ {
		at := first
		if n > 1 {
			at = first.Add(time.Duration(float64(span) * float64(i) / float64(n-1)))
		}
		anchor := "middle"
		switch {
		case n == 1:
		case i == 0:
			anchor = "start"
		case i == n-1:
			anchor = "end"
		}
		c.XLabels = append(c.XLabels, chartTick{Pos: xOf(at), Text: at.UTC().Format(layout), Anchor: anchor})
	}
	return c
}

// Too many dots clutter a line and weigh down the page: beyond this many
// samples they are left out (the line and the table remain).
const maxDots = 120

func chartDots(c chart) []chartBar {
	if len(c.Dots) > maxDots {
		return nil
	}
	return c.Dots
}

func hoursDuration(h float64) time.Duration {
	return time.Duration(h * float64(time.Hour)).Round(time.Second)
}
