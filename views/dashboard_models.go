package views

import (
	"fmt"
	"strconv"
	"time"
)

// NavPlatform is the navigation key of the platform operators' overview
// (/operator).
const NavPlatform = "platform"

// DashboardView is the tenant overview: the figures the caller's role
// comes for, each linking to its page. A handler fills only what the
// caller may open; nothing empty is shown as zero.
type DashboardView struct {
	TenantName string
	Role       string
	// Tiles are the headline figures, in order.
	Tiles []Tile
	// Members and ActiveTokens are the people and token counts, linked by
	// MembersHref and TokensHref (empty: not shown).
	Members, ActiveTokens   int
	MembersHref, TokensHref string
	// Activity is sandboxes and runs per day; nil when the caller may read
	// neither.
	Activity *ActivityPanel
	// Cost is the month to date with its per-day chart; nil without
	// usage.read.
	Cost *CostPanel
	// Compliance is the score with what changed and the last probe; nil
	// without compliance.read.
	Compliance *CompliancePanel
	// Terminals are the live terminals to watch now (TerminalsHref set
	// when the caller may watch them).
	Terminals     []LiveTerminalRow
	TerminalsHref string
	// Runs are recent runs (the caller's own for a developer), RunsHref
	// set when the caller may read runs; RunsMine says whose they are.
	Runs     []RecentRun
	RunsHref string
	RunsMine bool
	// Tops are top lists (users by cost, workflows by runs).
	Tops []TopList
	// Recent is the folded audit feed, AuditHref set when the caller may
	// read the audit log.
	Recent    []RecentRow
	AuditHref string
	// Operator is the platform operators' part; nil for everyone else.
	Operator *OperatorPanel
	Areas    []AreaCard
	// Quota is the tenant's quota lines; those at 80 % or more show as
	// warnings.
	Quota []QuotaLineView
}

// AreaCard is one product area on the dashboard, linking to its page.
type AreaCard struct {
	Title   string
	Href    string
	Summary string
}

// Tile is one headline figure. ID names it in data-testid ("tile-"+ID);
// Value is the figure as shown, Note what it is measured against.
type Tile struct {
	ID, Label, Value, Note, Href string
	// Tone colours the figure: "", "ok", "warn" or "bad".
	Tone string
}

// ActivityPanel is sandboxes and runs created per UTC day.
type ActivityPanel struct {
	Days []ActivityDay
	// ShowSandboxes and ShowRuns say which series the caller may read.
	ShowSandboxes, ShowRuns   bool
	SandboxesHref, RunsHref   string
	Sandboxes, Runs, Finished int
}

// ActivityDay is one day of ActivityPanel.
type ActivityDay struct {
	Day                  time.Time
	Sandboxes, Runs, Bad int
}

// CostPanel is the month to date of the tenant's usage.
type CostPanel struct {
	Month    string // "December 2026"
	Days     []UsageDay
	Total    UsageTotals
	Forecast float64
	// Trend is the change against the same days of the month before, in
	// words ("+25 % on November"); "" when that month cost nothing.
	Trend     string
	UsageHref string
	// ExportHref is the export form, for roles that may export.
	ExportHref string
}

// CompliancePanel is the checklist's score, its latest changes and the
// latest probe run.
type CompliancePanel struct {
	Pass, Warn, Fail, Items int
	Changes                 []ComplianceChange
	Probe                   *ProbeRunRow
	Href, ExportHref        string
}

// LiveTerminalRow is one live terminal of the dashboard.
type LiveTerminalRow struct {
	Href, Sandbox, Driver string
	Watchers              int
	Since                 time.Time
}

// RecentRun is one run of the dashboard.
type RecentRun struct {
	Href, Title, State, By string
	At                     time.Time
}

// TopList is a top list of the dashboard.
type TopList struct {
	ID, Title, Unit string
	Href            string
	Lines           []TopLine
}

// TopLine is one line of a TopList.
type TopLine struct {
	Label, Value string
}

// RecentRow is one row of the folded audit feed: names and links, not
// ids. Count > 1 is a run of repeats, the newest shown, since First.
type RecentRow struct {
	Time, First      time.Time
	Count            int
	Type, Outcome    string
	Actor, ActorHref string
	Target, Href     string
	Detail           string
}

// OperatorPanel is the platform operators' overview.
type OperatorPanel struct {
	Hosts  []OperatorHost
	Near   []NearQuotaRow
	Frozen []FrozenRow
}

// OperatorHost is one libvirt host.
type OperatorHost struct {
	Name, State string
	VMs         int
}

// NearQuotaRow is a tenant at 80 % or more of a quota.
type NearQuotaRow struct {
	Slug, Href, Quota, Share string
	Over                     bool
}

// FrozenRow is a frozen tenant.
type FrozenRow struct {
	Slug, Href, Reason string
	Since              time.Time
}

// Dashboard charts reuse the usage page's coordinate system (chartW x
// chartH): bars of sandboxes and of runs side by side per day; the runs'
// bars are in Dots (a bar chart has no dots), so the template colours them
// apart.
func activityChart(a ActivityPanel) chart {
	var c chart
	if len(a.Days) == 0 {
		return c
	}
	top := 0
	for _, d := range a.Days {
		top = max(top, d.Sandboxes, d.Runs)
	}
	ceil := niceMax(float64(top))
	c.YTicks = yTicks(ceil, func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) })
	slot := chartPlotW / float64(len(a.Days))
	series := 0
	for _, on := range []bool{a.ShowSandboxes, a.ShowRuns} {
		if on {
			series++
		}
	}
	w := slot * (1 - chartBarGap) / float64(max(series, 1))
	every := (len(a.Days) + chartMaxXLabels - 1) / chartMaxXLabels
	for i, d := range a.Days {
		x := chartLeft + slot*float64(i) + slot*chartBarGap/2
		day := d.Day.UTC().Format("Jan 2")
		if a.ShowSandboxes {
			h := chartPlotH * float64(d.Sandboxes) / ceil
			c.Bars = append(c.Bars, chartBar{X: x, Y: chartPlotBottom - h, W: w, H: h, Title: fmt.Sprintf("%s: %s", day, plural(d.Sandboxes, "1 sandbox", strconv.Itoa(d.Sandboxes)+" sandboxes"))})
			x += w
		}
		if a.ShowRuns {
			h := chartPlotH * float64(d.Runs) / ceil
			c.Dots = append(c.Dots, chartBar{X: x, Y: chartPlotBottom - h, W: w, H: h, Title: fmt.Sprintf("%s: %s, %d failed", day, plural(d.Runs, "1 run", strconv.Itoa(d.Runs)+" runs"), d.Bad)})
		}
		if i%every == 0 {
			c.XLabels = append(c.XLabels, chartTick{Pos: chartLeft + slot*float64(i) + slot/2, Text: day, Anchor: "middle"})
		}
	}
	return c
}

// costChart is the usage page's daily cost chart over the month so far.
func costChart(p CostPanel) chart { return dailyChart(p.Days, p.Total.Currency) }

func (p CostPanel) forecastText() string { return moneyPrec(p.Forecast, p.Total.Currency, 2) }

// countText is a folded row's count ("×6"); "" for one.
func countText(n int) string {
	if n <= 1 {
		return ""
	}
	return "×" + strconv.Itoa(n)
}

func tileClass(t Tile) string {
	if t.Tone == "" {
		return "card stat tile"
	}
	return "card stat tile tile-" + t.Tone
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
