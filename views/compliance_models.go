package views

import (
	"strconv"
	"time"
)

// ComplianceView is the compliance page: the security checklist of the
// tenant, each item with its evidence, the history of status changes, the
// probe runs and the incident-response contacts.
type ComplianceView struct {
	Items   []ComplianceItem
	History []ComplianceChange
	Probes  []ProbeRunRow
	// Incident is the policy's incident-response section.
	Incident IncidentView
	// Freeze is set while an operator has frozen the tenant.
	Freeze *FreezeView
	// CanRun shows the "run the probe now" button (admins).
	CanRun bool
	// Print renders every item open, for the print-friendly page.
	Print bool
	// Unavailable says why there is no checklist (the server runs without
	// the compliance service).
	Unavailable string
	// CheckedAt is the latest evaluation.
	CheckedAt time.Time
}

// ComplianceItem is one checklist item.
type ComplianceItem struct {
	ID        string
	Question  string
	Status    string // pass, warn, fail
	Evidence  []ComplianceEvidence
	Since     time.Time
	CheckedAt time.Time
}

// ComplianceEvidence is one piece of evidence; Link is a page of ours
// ("/policy/versions/7", "/audit?type=...", "/compliance/probes/ID") or "".
type ComplianceEvidence struct {
	Kind string
	Text string
	Link string
}

// ComplianceChange is one status change of an item.
type ComplianceChange struct {
	ItemID   string
	Question string
	From, To string // From "" for the first evaluation
	At       time.Time
}

// ProbeRunRow is one probe run.
type ProbeRunRow struct {
	ID        string
	SandboxID string
	State     string // running, completed, failed
	StartedAt time.Time
	EndedAt   *time.Time
	Blocked   int
	Escaped   int
	Errors    int
	Checks    []ProbeCheckRow
	Output    string
}

// ProbeCheckRow is one escape the probe tried.
type ProbeCheckRow struct {
	ID, Name string
	Outcome  string // blocked, escaped, error
	Detail   string
}

// IncidentView is the tenant's incident-response process: from its
// policy, each of contacts and runbook falling back to the platform's.
type IncidentView struct {
	PolicyVersion int
	Contacts      []string
	// ContactsFrom and RunbookFrom are "tenant", "platform" or "" (none).
	ContactsFrom   string
	RunbookURL     string
	RunbookFrom    string
	OnEgressDenied string
}

// FreezeView is an operator's freeze of the tenant.
type FreezeView struct {
	Since  time.Time
	Reason string
	By     string
}

// Counts returns how many items pass, warn and fail.
func (v ComplianceView) Counts() (pass, warn, fail int) {
	for _, it := range v.Items {
		switch it.Status {
		case "pass":
			pass++
		case "warn":
			warn++
		case "fail":
			fail++
		}
	}
	return pass, warn, fail
}

func complianceItemID(id string) string { return "item-" + id }
func probeRunURL(id string) string      { return "/compliance/probes/" + id }
func probeRunAnchor(id string) string   { return "probe-" + id }
func complianceSummary(n int) string    { return strconv.Itoa(n) }
func policyVersionURL(v int) string     { return "/policy/versions/" + strconv.Itoa(v) }
func statusWord(s string) string {
	switch s {
	case "pass":
		return "Pass"
	case "warn":
		return "Warning"
	case "fail":
		return "Fail"
	case "":
		return "new"
	}
	return s
}

func probeOutcomePill(outcome string) string {
	switch outcome {
	case "blocked":
		return "pill pill-good"
	case "escaped":
		return "pill pill-bad"
	case "error":
		return "pill pill-warn"
	}
	return "pill"
}

func probeDuration(r ProbeRunRow) string {
	if r.EndedAt == nil {
		return "running"
	}
	return r.EndedAt.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
}

// NoProbeYet says no probe run has completed: the items the probe proves
// are at warning for want of evidence, which the page explains.
func (v ComplianceView) NoProbeYet() bool {
	for _, r := range v.Probes {
		if r.State == "completed" {
			return false
		}
	}
	return true
}
