package api

// Compliance is the tenant's security checklist, in the API and the export.
type Compliance struct {
	Tenant    string             `json:"tenant" doc:"the tenant's slug"`
	CheckedAt *string            `json:"checked_at" format:"date-time" doc:"latest evaluation"`
	Summary   map[string]int     `json:"summary" nonnull:"true" doc:"items per status"`
	Items     []ComplianceItem   `json:"items" nonnull:"true"`
	History   []ComplianceChange `json:"history" nonnull:"true"`
	Probes    []ProbeRun         `json:"probe_runs" nonnull:"true"`
	Incident  *Incident          `json:"incident_response,omitempty" doc:"the export only"`
}

// ComplianceItem is one item: every field always present.
type ComplianceItem struct {
	ID        string               `json:"id" doc:"stable item id, e.g. egress_restricted"`
	Question  string               `json:"question"`
	Status    string               `json:"status" enum:"pass,warn,fail"`
	Evidence  []ComplianceEvidence `json:"evidence" nonnull:"true"`
	CheckedAt string               `json:"checked_at" format:"date-time" doc:"when it was last evaluated"`
	Since     string               `json:"since" format:"date-time" doc:"when its current status began"`
}

// ComplianceEvidence is one piece of evidence for an item.
type ComplianceEvidence struct {
	Kind string `json:"kind" doc:"policy, platform, live, audit or probe"`
	Text string `json:"text"`
	Link string `json:"link,omitempty" doc:"a page of the web app showing it"`
}

// ComplianceChange is a change of an item's status.
type ComplianceChange struct {
	ItemID string `json:"item_id"`
	From   string `json:"from" doc:"previous status; empty for the first evaluation"`
	To     string `json:"to" doc:"new status"`
	At     string `json:"at" format:"date-time"`
}

// ProbeRun is a run of the compliance probe.
type ProbeRun struct {
	ID        string       `json:"id"`
	SandboxID string       `json:"sandbox_id" doc:"the probe's sandbox, destroyed afterwards"`
	State     string       `json:"state" enum:"running,completed,failed"`
	StartedAt string       `json:"started_at" format:"date-time"`
	EndedAt   *string      `json:"ended_at" format:"date-time"`
	Checks    []ProbeCheck `json:"checks" nonnull:"true"`
	Output    string       `json:"output,omitempty" doc:"what the probe printed (bounded)"`
}

// ProbeCheck is one escape the probe tried.
type ProbeCheck struct {
	ID      string `json:"id"`
	Name    string `json:"name" doc:"the escape tried"`
	Outcome string `json:"outcome" enum:"blocked,escaped,error"`
	Detail  string `json:"detail"`
}

// ProbeRunList answers GET /api/v1/compliance/probes.
type ProbeRunList struct {
	ProbeRuns []ProbeRun `json:"probe_runs" nonnull:"true"`
}

// Incident is the incident-response process as exported: contacts and
// runbook with where each comes from ("tenant": the policy, "platform":
// the deployment's settings, "": nobody names one).
type Incident struct {
	PolicyVersion int      `json:"policy_version"`
	Contacts      []string `json:"contacts"`
	ContactsFrom  string   `json:"contacts_from" enum:"tenant,platform,"`
	RunbookURL    string   `json:"runbook_url"`
	RunbookFrom   string   `json:"runbook_from" enum:"tenant,platform,"`
	FrozenAt      *string  `json:"frozen_at" format:"date-time"`
}
