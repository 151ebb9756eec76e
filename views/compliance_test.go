package views

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// sampleCompliance is a checklist with every status, evidence with and
// without links, history and two probe runs.
func sampleCompliance(print bool) ComplianceView {
	at := sampleTime("2026-11-30T08:00:00Z")
	ended := at.Add(95 * time.Second)
	return ComplianceView{
		Print: print, CanRun: !print, CheckedAt: at,
		Items: []ComplianceItem{
			{ID: "host_isolation", Question: "Is the agent isolated from the host operating system?", Status: "pass", Since: at.Add(-48 * time.Hour), CheckedAt: at,
				Evidence: []ComplianceEvidence{{Kind: "platform", Text: "every sandbox runs in a VM of its tenant"},
					{Kind: "probe", Text: "probe: read host files: blocked", Link: "/compliance/probes/run-1"}}},
			{ID: "egress_restricted", Question: "Is outbound network traffic restricted?", Status: "fail", Since: at, CheckedAt: at,
				Evidence: []ComplianceEvidence{{Kind: "policy", Text: "the policy (version 4) allows egress by default", Link: "/policy/versions/4"}}},
			{ID: "time_limits", Question: "Is execution time limited?", Status: "warn", Since: at, CheckedAt: at},
		},
		History: []ComplianceChange{
			{ItemID: "egress_restricted", Question: "Is outbound network traffic restricted?", From: "pass", To: "fail", At: at},
			{ItemID: "host_isolation", Question: "Is the agent isolated from the host operating system?", From: "", To: "pass", At: at.Add(-48 * time.Hour)},
		},
		Probes: []ProbeRunRow{
			{ID: "run-1", SandboxID: "sb-1", State: "completed", StartedAt: at, EndedAt: &ended, Blocked: 1, Escaped: 1,
				Checks: []ProbeCheckRow{{ID: "ssh_keys", Name: "read SSH keys", Outcome: "blocked", Detail: "no ~/.ssh"},
					{ID: "internet_proxy", Name: "reach the internet through the proxy", Outcome: "escaped", Detail: "HTTP 200 from 127.0.0.1"}},
				Output: "STOCKADE-PROBE ssh_keys blocked\n<b>not html</b>\n"},
			{ID: "run-0", State: "failed", StartedAt: at.Add(-24 * time.Hour), EndedAt: &ended, Errors: 1,
				Checks: []ProbeCheckRow{{ID: "ssh_keys", Name: "read SSH keys", Outcome: "error", Detail: "no sandbox"}}},
		},
		Incident: IncidentView{PolicyVersion: 4, Contacts: []string{"secops@acme.test"}, RunbookURL: "https://wiki.acme.test/runbook", OnEgressDenied: "log"},
		Freeze:   &FreezeView{Since: at, Reason: "agent exfiltrating", By: "op@platform.test"},
	}
}

// TestCompliancePage: the scorecard counts, every item is a
// keyboard-operable <details> whose evidence links go where the evidence
// says, the print view opens them all, and probe output is text.
func TestCompliancePage(t *testing.T) {
	tests := []struct {
		name     string
		out      string
		wantOpen bool
		wantRun  bool
	}{
		{"page", render(t, Compliance(samplePageModel("Compliance", NavCompliance), sampleCompliance(false))), false, true},
		{"print", render(t, CompliancePrint(samplePageModel("Compliance", NavCompliance), sampleCompliance(true))), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := parse(t, tc.out)
			items := all(doc, func(n *html.Node) bool {
				id, _ := attr(n, "id")
				return n.Data == "li" && strings.HasPrefix(id, "item-")
			})
			if len(items) != 3 {
				t.Fatalf("Got(items) = %d; want 3", len(items))
			}
			for _, it := range items {
				ds := all(it, tag("details"))
				if len(ds) != 1 || len(all(ds[0], tag("summary"))) != 1 {
					t.Fatalf("Got(item markup) without one <details><summary>; want each item expandable by keyboard")
				}
				if _, open := attr(ds[0], "open"); open != tc.wantOpen {
					t.Errorf("Got(details open) = %v; want %v", open, tc.wantOpen)
				}
			}
			links := map[string]bool{}
			for _, a := range all(doc, tag("a")) {
				if h, _ := attr(a, "href"); h != "" {
					links[h] = true
				}
			}
			for _, want := range []string{"/compliance/probes/run-1", "/policy/versions/4", "#item-egress_restricted", "https://wiki.acme.test/runbook",
				"mailto:secops@acme.test", "/sandboxes/sb-1"} {
				if !links[want] {
					t.Errorf("Got(links) without %s; want it", want)
				}
			}
			if got := text(doc); !strings.Contains(got, "1 pass") || !strings.Contains(got, "1 warning") || !strings.Contains(got, "1 fail") {
				t.Errorf("Got(scorecard) = %.300q; want 1 pass, 1 warning, 1 fail", got)
			}
			if len(all(doc, tag("b"))) > 0 || !strings.Contains(text(doc), "<b>not html</b>") {
				t.Error("Got(probe output) rendered as HTML; want it shown as text")
			}
			if got := len(all(doc, withAttr("action", "/compliance/probe"))) == 1; got != tc.wantRun {
				t.Errorf("Got(run-probe form) = %v; want %v", got, tc.wantRun)
			}
			styled := len(all(doc, func(n *html.Node) bool {
				h, _ := attr(n, "href")
				return n.Data == "link" && strings.Contains(h, "css/compliance.css")
			})) > 0
			if byID(doc, "tenant-frozen") == nil || !styled {
				t.Error("Got(page) without the freeze notice or the compliance stylesheet; want both")
			}
		})
	}
}
