package compliance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// strict is what a tenant on the default policy, probed an hour ago with
// every escape blocked, gives the evaluation.
func strict() inputs {
	cfg := Config{Policies: noPolicies{}}
	if err := cfg.checkAndSetDefaults(); err != nil {
		panic(err)
	}
	run := &ProbeRun{ID: "run-1", TenantID: "t1", SandboxID: "sb-1", State: RunCompleted, StartedAt: t0.Add(-time.Hour)}
	for _, c := range CheckNames() {
		run.Checks = append(run.Checks, ProbeCheck{ID: c.ID, Name: c.Name, Outcome: OutcomeBlocked, Detail: "tried"})
	}
	return inputs{
		now: t0, cfg: cfg, pol: policy.Version{TenantID: "t1", Version: 0, Doc: policy.Defaults()},
		platform: Platform{Gateway: true, SecretsEncrypted: true, OperatorContacts: []string{"ops@example.test"}, ControlPlane: "http://127.0.0.1:8080",
			IncidentContacts: []string{"secops@example.test"}, IncidentRunbookURL: "https://wiki.example.test/agent-incident"},
		live: &Facts{Since: t0.Add(-cfg.Window), Active: 1, Ended: 3, Destroyed: 3, Execs: 5, RunningVMs: 1},
		run:  run, runSandbox: &SandboxRef{ID: "sb-1", State: "destroyed"},
		secrets: []secrets.Secret{}, auditExecs: 5, auditProbeExecs: 3, auditProbeRuns: 1,
	}
}

// noPolicies satisfies Config's requirement; evaluate reads in.pol.
type noPolicies struct{}

func (noPolicies) Current(context.Context, string) (policy.Version, error) {
	return policy.Version{}, nil
}

func itemOf(items []Item, id string) Item {
	for _, it := range items {
		if it.ID == id {
			return it
		}
	}
	return Item{}
}

func TestEvaluateStrictPassesEveryItem(t *testing.T) {
	items := evaluate(strict())
	if len(items) != len(checklist()) {
		t.Fatalf("Got(len(evaluate)) = %d; want %d", len(items), len(checklist()))
	}
	for _, it := range items {
		if it.Status != StatusPass {
			t.Errorf("Got(%s) = %s %+v; want pass", it.ID, it.Status, it.Evidence)
		}
		if it.Question == "" || len(it.Evidence) == 0 || !it.CheckedAt.Equal(t0) {
			t.Errorf("Got(%s) = %+v; want a question, evidence and checked_at %v", it.ID, it, t0)
		}
		backed := false
		for _, e := range it.Evidence {
			if e.Link == "/compliance/probes/run-1" {
				backed = true
			}
		}
		if !backed {
			t.Errorf("Got(%s evidence) = %+v; want a link to the probe run", it.ID, it.Evidence)
		}
	}
}

func TestEvaluateWeakened(t *testing.T) {
	escaped := func(id string) func(in *inputs) {
		return func(in *inputs) {
			for i := range in.run.Checks {
				if in.run.Checks[i].ID == id {
					in.run.Checks[i].Outcome = OutcomeEscaped
				}
			}
		}
	}
	tests := []struct {
		name   string
		change func(in *inputs)
		item   string
		want   Status
		text   string
	}{
		{"egress allowed by default", func(in *inputs) { in.pol.Doc.Network.Egress.Default = policy.EgressAllow },
			ItemEgressRestricted, StatusFail, "allows egress by default"},
		{"egress escaped in the probe", escaped(CheckInternetProxy), ItemEgressRestricted, StatusFail, "ESCAPED"},
		{"no gateway", func(in *inputs) { in.platform.Gateway = false }, ItemEgressRestricted, StatusFail, "no egress gateway"},
		{"a week of lifetime", func(in *inputs) {
			in.pol.Doc.Lifetime.MaxTimeoutSeconds, in.pol.Doc.Lifetime.DefaultTimeoutSeconds = 604800, 604800
		}, ItemTimeLimits, StatusWarn, "up to 7d"},
		{"lifetime escaped", escaped(CheckLifetime), ItemTimeLimits, StatusFail, "ESCAPED"},
		{"a sandbox past its lifetime", func(in *inputs) {
			in.live.Overdue = []SandboxRef{{ID: "sb-9", State: "running", ExpiresAt: t0.Add(-time.Hour)}}
		}, ItemEnvironmentsDestroyed, StatusFail, "past their lifetime"},
		{"a stopped sandbox left", func(in *inputs) { in.live.Lingering = []SandboxRef{{ID: "sb-8", State: "stopped"}} },
			ItemEnvironmentsDestroyed, StatusFail, "were not destroyed"},
		{"the probe sandbox left running", func(in *inputs) { in.runSandbox.State = "running" },
			ItemEnvironmentsDestroyed, StatusFail, "still running"},
		{"memory escaped", escaped(CheckMemory), ItemResourceLimits, StatusFail, "ESCAPED"},
		{"ssh keys read", escaped(CheckSSHKeys), ItemSSHKeys, StatusFail, "ESCAPED"},
		{".env read", escaped(CheckDotenv), ItemDotenvOutsideWorkspace, StatusFail, "ESCAPED"},
		{"host files read", escaped(CheckHostFiles), ItemHostIsolation, StatusFail, "ESCAPED"},
		{"host folders shared", func(in *inputs) { in.platform.HostMounts = true }, ItemHostIsolation, StatusFail, "share host folders"},
		{"a network device", func(in *inputs) { in.platform.NetworkDevices = true }, ItemEgressRestricted, StatusFail, "around the egress gateway"},
		{"real credentials seen", escaped(CheckCredentials), ItemCredentialsOutside, StatusFail, "ESCAPED"},
		{"responses scrubbed", func(in *inputs) {}, ItemCredentialsOutside, StatusPass, "audited as egress.secret_reflected"},
		{"a secret that may go in bodies", func(in *inputs) {
			in.secrets = []secrets.Secret{{Name: "API_KEY", Hosts: []string{"api.example.com"}, Inject: []string{"authorization", "body"}, State: secrets.StateActive, CreatedAt: t0}}
		}, ItemCredentialsOutside, StatusPass, "API_KEY (authorization, body)"},
		{"control plane reached", escaped(CheckControlPlaneProxy), ItemProductionAccess, StatusFail, "ESCAPED"},
		{"private ranges exempt with egress open", func(in *inputs) {
			in.platform.AllowCIDRs = []string{"127.0.0.0/8"}
			in.pol.Doc.Network.Egress.Allow = []policy.Rule{{Domain: "api.example.com"}}
		}, ItemProductionAccess, StatusWarn, "127.0.0.0/8"},
		{"private ranges exempt, egress closed", func(in *inputs) { in.platform.AllowCIDRs = []string{"127.0.0.0/8"} },
			ItemProductionAccess, StatusPass, "allows no host"},
		{"system paths written", escaped(CheckSystemWrite), ItemFilesystemPermissions, StatusFail, "ESCAPED"},
		{"root's files read through the files API", escaped(CheckFilesAPI), ItemFilesystemPermissions, StatusFail, "ESCAPED"},
		{"writable root in the policy", func(in *inputs) { in.pol.Doc.Filesystem.ReadOnlyRoot = false },
			ItemFilesystemPermissions, StatusWarn, "read_only_root is false"},
		{"commands without audit events", func(in *inputs) { in.auditExecs = 2 }, ItemActionsLogged, StatusFail, "only 2 sandbox.exec"},
		{"a tenant runbook", func(in *inputs) { in.pol.Doc.IncidentResponse.RunbookURL = "https://wiki.tenant.test/agents" },
			ItemIncidentResponse, StatusPass, "from the tenant's policy (version 0): https://wiki.tenant.test/agents"},
		{"audit kept forever", func(in *inputs) { in.pol.Doc.Audit.RetentionDays = 0 }, ItemAuditPossible, StatusPass, "forever"},
		{"a terminal session without recording", func(in *inputs) { in.live.Sessions, in.live.Unrecorded = 3, 1 },
			ItemActionsLogged, StatusWarn, "1 terminal sessions"},
		{"short audit retention", func(in *inputs) { in.pol.Doc.Audit.RetentionDays = 30 }, ItemAuditPossible, StatusWarn, "30 days"},
		{"no incident contact", func(in *inputs) { in.platform.IncidentContacts = nil }, ItemIncidentResponse, StatusWarn, "no incident contact"},
		{"no runbook", func(in *inputs) { in.platform.IncidentRunbookURL = "" }, ItemIncidentResponse, StatusWarn, "no runbook"},
		{"tenant contacts", func(in *inputs) {
			in.platform.IncidentContacts = nil
			in.pol.Doc.IncidentResponse.NotifyEmails = []string{"sec@tenant.test"}
		}, ItemIncidentResponse, StatusPass, "sec@tenant.test"},
		{"a granted secret that never expires", func(in *inputs) {
			in.pol.Doc.Credentials.Secrets = []string{"GH_TOKEN"}
			in.secrets = []secrets.Secret{{Name: "GH_TOKEN", Hosts: []string{"api.github.com"}, State: secrets.StateActive, CreatedAt: t0}}
		}, ItemShortLivedCredentials, StatusWarn, "never expires"},
		{"a granted secret scoped and short-lived", func(in *inputs) {
			in.pol.Doc.Credentials.Secrets = []string{"GH_TOKEN"}
			exp := t0.Add(24 * time.Hour)
			in.secrets = []secrets.Secret{{Name: "GH_TOKEN", Hosts: []string{"api.github.com"}, State: secrets.StateActive, CreatedAt: t0, ExpiresAt: &exp}}
		}, ItemShortLivedCredentials, StatusPass, "swapped in only for api.github.com"},
		{"no probe run", func(in *inputs) { in.run, in.runSandbox = nil, nil }, ItemSSHKeys, StatusWarn, "no probe run yet"},
		{"a failed probe run", func(in *inputs) { in.run.State, in.run.Output = RunFailed, "x\nprobe failed: no vm" },
			ItemEgressRestricted, StatusWarn, "probe failed: no vm"},
		{"a stale probe run", func(in *inputs) { in.run.StartedAt = t0.Add(-72 * time.Hour) }, ItemResourceLimits, StatusWarn, "stale"},
		{"a check that could not be made", func(in *inputs) { in.run.Checks[0].Outcome = OutcomeError }, ItemHostIsolation, StatusWarn, "could not be tried"},
		{"a check missing from the run", func(in *inputs) { in.run.Checks = in.run.Checks[1:] }, ItemHostIsolation, StatusWarn, "not reported"},
		{"no live data", func(in *inputs) { in.live, in.liveErr = nil, "database down" }, ItemEnvironmentsDestroyed, StatusWarn, "database down"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := strict()
			tc.change(&in)
			it := itemOf(evaluate(in), tc.item)
			var texts []string
			for _, e := range it.Evidence {
				texts = append(texts, e.Text)
			}
			if it.Status != tc.want || !strings.Contains(strings.Join(texts, "\n"), tc.text) {
				t.Errorf("Got(%s) = %s %q; want %s with %q", tc.item, it.Status, texts, tc.want, tc.text)
			}
		})
	}
}

// TestEvaluateIncidentResponse: the incident-response item passes only when
// contacts and a runbook are both named, by the tenant's policy or by the
// platform, and says which is missing and where each comes from. Platform
// operators who merely sign in are not incident contacts: a tenant with no
// contacts and no runbook warns (it passed before).
func TestEvaluateIncidentResponse(t *testing.T) {
	for _, tc := range []struct {
		name                              string
		tenantContacts, tenantRunbook     bool
		platformContacts, platformRunbook bool
		want                              Status
		texts                             []string
	}{
		{"nothing named, operators configured", false, false, false, false, StatusWarn,
			[]string{"no incident contact: neither the tenant's policy (version 0, incident_response.notify_emails) nor the platform (STOCKADE_INCIDENT_CONTACTS)",
				"no runbook: neither the tenant's policy (version 0, incident_response.runbook_url) nor the platform (STOCKADE_INCIDENT_RUNBOOK_URL)"}},
		{"tenant contacts only", true, false, false, false, StatusWarn,
			[]string{"incident contacts from the tenant's policy (version 0): sec@tenant.test", "no runbook"}},
		{"tenant runbook only", false, true, false, false, StatusWarn,
			[]string{"no incident contact", "from the tenant's policy (version 0): https://wiki.tenant.test/ir"}},
		{"the tenant names both", true, true, false, false, StatusPass,
			[]string{"from the tenant's policy (version 0): sec@tenant.test", "from the tenant's policy (version 0): https://wiki.tenant.test/ir"}},
		{"the platform names both", false, false, true, true, StatusPass,
			[]string{"from the platform (STOCKADE_INCIDENT_CONTACTS; the policy, version 0, names none): ir@platform.test",
				"from the platform (STOCKADE_INCIDENT_RUNBOOK_URL; the policy, version 0, links none): https://wiki.platform.test/ir"}},
		{"tenant contacts, platform runbook", true, false, false, true, StatusPass,
			[]string{"from the tenant's policy (version 0): sec@tenant.test", "from the platform (STOCKADE_INCIDENT_RUNBOOK_URL"}},
		{"the tenant's win over the platform's", true, true, true, true, StatusPass,
			[]string{"sec@tenant.test", "https://wiki.tenant.test/ir"}},
		{"platform contacts only", false, false, true, false, StatusWarn,
			[]string{"ir@platform.test", "no runbook"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strict()
			in.platform.IncidentContacts, in.platform.IncidentRunbookURL = nil, ""
			if tc.tenantContacts {
				in.pol.Doc.IncidentResponse.NotifyEmails = []string{"sec@tenant.test"}
			}
			if tc.tenantRunbook {
				in.pol.Doc.IncidentResponse.RunbookURL = "https://wiki.tenant.test/ir"
			}
			if tc.platformContacts {
				in.platform.IncidentContacts = []string{"ir@platform.test"}
			}
			if tc.platformRunbook {
				in.platform.IncidentRunbookURL = "https://wiki.platform.test/ir"
			}
			it := itemOf(evaluate(in), ItemIncidentResponse)
			var texts []string
			for _, e := range it.Evidence {
				texts = append(texts, e.Text)
			}
			all := strings.Join(texts, "\n")
			if it.Status != tc.want {
				t.Errorf("Got(status) = %s %q; want %s", it.Status, texts, tc.want)
			}
			for _, want := range tc.texts {
				if !strings.Contains(all, want) {
					t.Errorf("Got(evidence) = %q; want %q in it", texts, want)
				}
			}
			if tc.tenantContacts && strings.Contains(all, "ir@platform.test") {
				t.Errorf("Got(evidence) = %q; want the tenant's contacts, not the platform's", texts)
			}
		})
	}
}
