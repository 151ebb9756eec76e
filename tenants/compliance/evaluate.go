package compliance

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/policy"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// inputs is everything one evaluation of a tenant reads.
type inputs struct {
	now      time.Time
	cfg      Config
	pol      policy.Version
	platform Platform
	// live is nil when live data could not be read (liveErr says why).
	live    *Facts
	liveErr string
	// run is the newest probe run that ended, nil before the first;
	// runSandbox the state of its sandbox now (nil: unknown).
	run        *ProbeRun
	runSandbox *SandboxRef
	// secrets the tenant holds (nil: no secret store).
	secrets []secrets.Secret
	// audit counts since live.Since: sandbox.exec events, the probe
	// sandbox's sandbox.exec events (-1: not counted, past the audit
	// retention), and compliance.probe_run events.
	auditExecs, auditProbeExecs, auditProbeRuns int64
}

// eval builds one item.
type eval struct {
	status Status
	ev     []Evidence
}

func (e *eval) add(s Status, kind, link, format string, args ...any) {
	e.status = worse(e.status, s)
	e.ev = append(e.ev, Evidence{Kind: kind, Text: fmt.Sprintf(format, args...), Link: link})
}

// evaluate answers the checklist from in. It is a pure function of in.
func evaluate(in inputs) []Item {
	fns := map[string]func(in inputs, e *eval){
		ItemHostIsolation:          evalHostIsolation,
		ItemSSHKeys:                evalSSHKeys,
		ItemDotenvOutsideWorkspace: evalDotenv,
		ItemShortLivedCredentials:  evalShortLived,
		ItemEgressRestricted:       evalEgress,
		ItemResourceLimits:         evalResources,
		ItemTimeLimits:             evalTime,
		ItemProductionAccess:       evalProduction,
		ItemFilesystemPermissions:  evalFilesystem,
		ItemActionsLogged:          evalActionsLogged,
		ItemEnvironmentsDestroyed:  evalDestroyed,
		ItemAuditPossible:          evalAuditPossible,
		ItemCredentialsOutside:     evalCredentialsOutside,
		ItemIncidentResponse:       evalIncident,
	}
	out := make([]Item, 0, len(fns))
	for _, q := range checklist() {
		e := &eval{status: StatusPass}
		fns[q.id](in, e)
		out = append(out, Item{ID: q.id, Question: q.text, Status: e.status, Evidence: e.ev, CheckedAt: in.now, Since: in.now})
	}
	return out
}

func policyLink(v policy.Version) string { return fmt.Sprintf("/policy/versions/%d", v.Version) }

func runLink(r *ProbeRun) string { return "/compliance/probes/" + r.ID }

func auditLink(typ, q string) string {
	v := url.Values{}
	if typ != "" {
		v.Set("type", typ)
	}
	if q != "" {
		v.Set("q", q)
	}
	if len(v) == 0 {
		return "/audit"
	}
	return "/audit?" + v.Encode()
}

// probe adds the outcome of the named checks of the latest run: escaped
// fails the item; a missing, failed or stale run, or a check that could not
// be made, warns.
func probe(in inputs, e *eval, ids ...string) {
	r := in.run
	switch {
	case r == nil:
		e.add(StatusWarn, KindProbe, "/compliance", "no probe run yet: the checks below rest on configuration alone until one runs")
		return
	case r.State == RunFailed:
		e.add(StatusWarn, KindProbe, runLink(r), "the latest probe run (%s) failed: %s", r.StartedAt.Format(time.RFC3339), lastLine(r.Output))
		return
	}
	if in.cfg.ProbeStaleAfter > 0 && in.now.Sub(r.StartedAt) > in.cfg.ProbeStaleAfter {
		e.add(StatusWarn, KindProbe, runLink(r), "the latest probe run is stale: it ran %s ago (%s)",
			in.now.Sub(r.StartedAt).Round(time.Minute), r.StartedAt.Format(time.RFC3339))
	}
	if len(ids) == 0 {
		blocked := 0
		for _, c := range r.Checks {
			if c.Outcome == OutcomeBlocked {
				blocked++
			}
		}
		e.add(StatusPass, KindProbe, runLink(r), "the latest probe run (%s) tried %d escapes in sandbox %s: %d blocked",
			r.StartedAt.Format(time.RFC3339), len(r.Checks), r.SandboxID, blocked)
	}
	for _, id := range ids {
		c, ok := r.Check(id)
		switch {
		case !ok:
			e.add(StatusWarn, KindProbe, runLink(r), "probe: %s: not reported by the run", CheckName(id))
		case c.Outcome == OutcomeBlocked:
			e.add(StatusPass, KindProbe, runLink(r), "probe: %s: blocked (%s)", CheckName(id), c.Detail)
		case c.Outcome == OutcomeEscaped:
			e.add(StatusFail, KindProbe, runLink(r), "probe: %s: ESCAPED (%s)", CheckName(id), c.Detail)
		default:
			e.add(StatusWarn, KindProbe, runLink(r), "probe: %s: could not be tried (%s)", CheckName(id), c.Detail)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "no output"
	}
	return s
}

func evalHostIsolation(in inputs, e *eval) {
	p := in.platform
	typ := p.DomainType
	if typ == "" {
		typ = "detected per host"
	}
	e.add(StatusPass, KindPlatform, "/vms", "every sandbox is a crun container (pid, mount, network, ipc, uts and cgroup namespaces, seccomp, no capabilities) nested inside a libvirt VM (domain type %s) that runs only this tenant's sandboxes", typ)
	switch {
	case p.HostMounts:
		e.add(StatusFail, KindPlatform, "/vms", "the VMs share host folders, devices or memory with the guest")
	case p.NetworkDevices:
		e.add(StatusFail, KindPlatform, "/vms", "the VMs have a network device: the guest reaches networks without the egress gateway")
	default:
		e.add(StatusPass, KindPlatform, "/vms", "the VM definition has no shared host folder, host device, shared memory or network device: the guest reaches the host only through its agent channel")
	}
	if in.live != nil {
		e.add(StatusPass, KindLive, "/vms", "%d VMs of the tenant running now", in.live.RunningVMs)
	}
	probe(in, e, CheckUser, CheckHostFiles)
}

func evalSSHKeys(in inputs, e *eval) {
	e.add(StatusPass, KindPlatform, "", "sandbox templates carry no keys and no host folder is shared into the VMs")
	probe(in, e, CheckSSHKeys)
}

func evalDotenv(in inputs, e *eval) {
	e.add(StatusPass, KindPlatform, "", "a sandbox sees its template, its own /workspace and /tmp: nothing of other sandboxes or the host")
	probe(in, e, CheckDotenv)
}

func evalShortLived(in inputs, e *eval) {
	granted := in.pol.Doc.Credentials.Secrets
	if len(granted) == 0 {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) grants sandboxes no credentials", in.pol.Version)
	} else {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) grants %s, each as a placeholder valid for one sandbox only",
			in.pol.Version, strings.Join(granted, ", "))
	}
	if in.secrets != nil {
		live := 0
		for _, s := range in.secrets {
			if s.State != secrets.StateActive {
				continue
			}
			live++
			if !contains(granted, s.Name) {
				continue
			}
			switch {
			case len(s.Hosts) == 0:
				e.add(StatusFail, KindLive, "/settings/secrets", "secret %s is scoped to no host", s.Name)
			case s.ExpiresAt == nil:
				e.add(StatusWarn, KindLive, "/settings/secrets", "secret %s (hosts %s) never expires", s.Name, strings.Join(s.Hosts, ", "))
			case s.ExpiresAt.Sub(s.CreatedAt) > in.cfg.MaxCredentialTTL:
				e.add(StatusWarn, KindLive, "/settings/secrets", "secret %s (hosts %s) lives %s, longer than %s", s.Name, strings.Join(s.Hosts, ", "),
					s.ExpiresAt.Sub(s.CreatedAt).Round(time.Hour), in.cfg.MaxCredentialTTL)
			default:
				e.add(StatusPass, KindLive, "/settings/secrets", "secret %s: swapped in only for %s, expires %s", s.Name, strings.Join(s.Hosts, ", "),
					s.ExpiresAt.Format(time.RFC3339))
			}
		}
		if live == 0 {
			e.add(StatusPass, KindLive, "/settings/secrets", "the tenant holds no live secrets")
		}
	}
	probe(in, e, CheckCredentials)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func ruleList(rs []policy.Rule) string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		d := r.Domain
		if len(r.Ports) > 0 {
			ps := make([]string, len(r.Ports))
			for i, p := range r.Ports {
				ps[i] = fmt.Sprint(p)
			}
			d += ":" + strings.Join(ps, ",")
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

func evalEgress(in inputs, e *eval) {
	eg := in.pol.Doc.Network.Egress
	if eg.Default == policy.EgressAllow {
		e.add(StatusFail, KindPolicy, policyLink(in.pol), "the policy (version %d) allows egress by default: every host not denied is reachable (denied: %s)",
			in.pol.Version, ruleList(eg.Deny))
	} else {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) denies egress by default; allowed: %s", in.pol.Version, ruleList(eg.Allow))
	}
	if in.platform.NetworkDevices {
		e.add(StatusFail, KindPlatform, "/vms", "the VMs have a network device: traffic can go around the egress gateway")
	}
	if in.platform.Gateway {
		e.add(StatusPass, KindPlatform, "/egress?decision=deny", "the VMs have no network device: every connection goes through the egress gateway, which applies the policy and logs each decision")
	} else {
		e.add(StatusFail, KindPlatform, "", "no egress gateway is configured")
	}
	if in.live != nil {
		e.add(StatusPass, KindLive, "/egress?decision=deny", "%d egress connections denied since %s", in.live.EgressDenied, in.live.Since.Format(time.RFC3339))
	}
	probe(in, e, CheckInternetProxy, CheckInternetDirect, CheckMetadataProxy, CheckMetadataDirect)
}

func evalResources(in inputs, e *eval) {
	r := in.pol.Doc.Resources
	e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) bounds a sandbox to %d vCPUs, %d MiB of memory and %d processes (cgroup v2 cpu.max, memory.max, pids.max)",
		in.pol.Version, r.MaxVCPUs, r.MaxMemoryMiB, r.MaxPids)
	probe(in, e, CheckMemory, CheckCPU)
}

func evalTime(in inputs, e *eval) {
	lt := in.pol.Doc.Lifetime
	maxLife := time.Duration(lt.MaxTimeoutSeconds) * time.Second
	def := time.Duration(lt.DefaultTimeoutSeconds) * time.Second
	if maxLife > in.cfg.MaxLifetime {
		e.add(StatusWarn, KindPolicy, policyLink(in.pol), "the policy (version %d) lets a sandbox live up to %s (default %s): more than %s",
			in.pol.Version, human(maxLife), human(def), human(in.cfg.MaxLifetime))
	} else {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) ends every sandbox after at most %s (default %s)",
			in.pol.Version, human(maxLife), human(def))
	}
	if lt.MaxIdleTimeoutSeconds > 0 {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "idle timeouts up to %s", human(time.Duration(lt.MaxIdleTimeoutSeconds)*time.Second))
	}
	if in.live != nil {
		if n := len(in.live.Overdue); n > 0 {
			e.add(StatusFail, KindLive, "/sandboxes/"+in.live.Overdue[0].ID, "%d sandboxes run past their lifetime (e.g. %s, due %s)", n,
				in.live.Overdue[0].ID, in.live.Overdue[0].ExpiresAt.Format(time.RFC3339))
		} else {
			e.add(StatusPass, KindLive, "/sandboxes", "no sandbox runs past its lifetime")
		}
	}
	probe(in, e, CheckCommandTimeout, CheckLifetime)
}

// human writes d in the largest whole unit.
func human(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

func evalProduction(in inputs, e *eval) {
	eg := in.pol.Doc.Network.Egress
	open := eg.Default == policy.EgressAllow || len(eg.Allow) > 0
	switch {
	case len(in.platform.AllowCIDRs) > 0 && open:
		e.add(StatusWarn, KindPlatform, policyLink(in.pol), "the operator exempts %s from the private-address block and the policy lets sandboxes reach hosts: a name resolving there is reachable",
			strings.Join(in.platform.AllowCIDRs, ", "))
	case len(in.platform.AllowCIDRs) > 0:
		e.add(StatusPass, KindPlatform, policyLink(in.pol), "the operator exempts %s from the private-address block, but the policy allows no host", strings.Join(in.platform.AllowCIDRs, ", "))
	default:
		e.add(StatusPass, KindPlatform, "", "the egress gateway refuses private, loopback, link-local, CGNAT and metadata addresses whatever the policy says, after resolving each name")
	}
	if in.platform.ControlPlane != "" {
		e.add(StatusPass, KindPlatform, "", "control plane at %s: reachable from a sandbox only through the gateway", in.platform.ControlPlane)
	}
	probe(in, e, CheckControlPlaneProxy, CheckControlPlaneDirect, CheckPrivateProxy, CheckPrivateDirect)
}

func evalFilesystem(in inputs, e *eval) {
	fs, pr := in.pol.Doc.Filesystem, in.pol.Doc.Process
	e.add(StatusPass, KindPlatform, "", "commands run as uid 1000 with no capabilities, no_new_privs and a seccomp filter; the template is a read-only disk and /proc/sys, /sys are mounted read-only; the files API opens files inside the sandbox with the same uid and groups")
	if fs.ReadOnlyRoot {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) asks for a read-only root, met by ownership rather than a read-only mount: the template disk is read-only and system paths belong to root, which a sandbox never is; a sandbox writes only /workspace, /tmp and its home, into a layer destroyed with it", in.pol.Version)
	} else {
		e.add(StatusWarn, KindPolicy, policyLink(in.pol), "the policy (version %d) does not ask for a read-only root (filesystem.read_only_root is false)", in.pol.Version)
	}
	if pr.AllowRoot {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy allows root, but the platform runs every sandbox as uid 1000 regardless")
	}
	if !pr.NoNewPrivileges {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy does not ask for no_new_privileges, but the platform sets it on every sandbox regardless")
	}
	e.add(StatusPass, KindPolicy, policyLink(in.pol), "files moved through the API are at most %d bytes; /workspace holds %d MiB", fs.MaxFileBytes, fs.WorkspaceMiB)
	probe(in, e, CheckUser, CheckSystemWrite, CheckFilesAPI)
}

func evalActionsLogged(in inputs, e *eval) {
	a := in.pol.Doc.Audit
	if a.RecordCommands {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) records commands; terminal keystrokes: %v", in.pol.Version, a.RecordTerminalInput)
	} else {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) does not ask to record commands, but every command is audited with its command line regardless", in.pol.Version)
	}
	if in.live != nil {
		since := in.live.Since.Format(time.RFC3339)
		if in.auditExecs < int64(in.live.Execs) {
			e.add(StatusFail, KindAudit, auditLink("sandbox.exec", ""), "%d commands ran since %s but only %d sandbox.exec audit events exist", in.live.Execs, since, in.auditExecs)
		} else {
			e.add(StatusPass, KindAudit, auditLink("sandbox.exec", ""), "every one of the %d commands run since %s has a sandbox.exec audit event with its command line", in.live.Execs, since)
		}
		if in.live.Unrecorded > 0 {
			e.add(StatusWarn, KindLive, "/terminals", "%d terminal sessions opened since %s have no recording", in.live.Unrecorded, since)
		} else {
			e.add(StatusPass, KindLive, "/terminals", "every terminal session opened since %s was recorded (%d; %d recordings since removed by retention)",
				since, in.live.Sessions, in.live.Sessions-in.live.Recorded)
		}
	} else {
		e.add(StatusWarn, KindLive, "", "live data unavailable: %s", in.liveErr)
	}
	if in.run != nil && in.run.SandboxID != "" && in.auditProbeExecs >= 0 {
		if in.auditProbeExecs > 0 {
			e.add(StatusPass, KindAudit, auditLink("sandbox.exec", in.run.SandboxID), "the probe's own %d commands were audited", in.auditProbeExecs)
		} else {
			e.add(StatusFail, KindAudit, auditLink("sandbox.exec", in.run.SandboxID), "the probe's commands in sandbox %s left no audit event", in.run.SandboxID)
		}
	}
	probe(in, e)
}

func evalDestroyed(in inputs, e *eval) {
	if in.live == nil {
		e.add(StatusWarn, KindLive, "", "live data unavailable: %s", in.liveErr)
	} else {
		l := in.live
		if n := len(l.Overdue); n > 0 {
			e.add(StatusFail, KindLive, "/sandboxes/"+l.Overdue[0].ID, "%d sandboxes run past their lifetime (e.g. %s)", n, l.Overdue[0].ID)
		}
		if n := len(l.Lingering); n > 0 {
			e.add(StatusFail, KindLive, "/sandboxes/"+l.Lingering[0].ID, "%d stopped sandboxes were not destroyed (e.g. %s, stopped: %s)", n, l.Lingering[0].ID, l.Lingering[0].Reason)
		}
		if len(l.Overdue) == 0 && len(l.Lingering) == 0 {
			e.add(StatusPass, KindLive, "/sandboxes", "no sandbox outlives its lifetime and no stopped sandbox is left; %d active now", l.Active)
		}
		e.add(StatusPass, KindLive, "/sandboxes", "%d sandboxes ended since %s, %d of them destroyed with everything they held", l.Ended, l.Since.Format(time.RFC3339), l.Destroyed)
	}
	e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) destroys stopped sandboxes within %ds; the platform destroys them as soon as it sees them stop",
		in.pol.Version, in.pol.Doc.Cleanup.DestroyStoppedAfterSeconds)
	if r := in.run; r != nil && r.SandboxID != "" && in.runSandbox != nil {
		sb := in.runSandbox
		if sb.State == "destroyed" || sb.State == "failed" {
			e.add(StatusPass, KindProbe, "/sandboxes/"+sb.ID, "the probe's sandbox %s was %s after its run", sb.ID, sb.State)
		} else {
			e.add(StatusFail, KindProbe, "/sandboxes/"+sb.ID, "the probe's sandbox %s is still %s", sb.ID, sb.State)
		}
	}
	probe(in, e, CheckLifetime)
}

func evalAuditPossible(in inputs, e *eval) {
	days := in.pol.Doc.Audit.RetentionDays
	e.add(StatusPass, KindPlatform, auditLink("", ""), "the audit log is append-only with stable event codes, filterable and exported as JSONL or CSV; auditors read it without changing anything")
	if days == 0 {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) keeps audit events forever", in.pol.Version)
	} else if days < in.cfg.MinAuditRetentionDays {
		e.add(StatusWarn, KindPolicy, policyLink(in.pol), "the policy (version %d) keeps audit events %d days: less than %d", in.pol.Version, days, in.cfg.MinAuditRetentionDays)
	} else {
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "the policy (version %d) keeps audit events %d days and terminal recordings %d days",
			in.pol.Version, days, in.pol.Doc.Cleanup.RecordingRetentionDays)
	}
	if in.live != nil && in.live.LastRecording != "" {
		e.add(StatusPass, KindLive, "/terminals/"+in.live.LastRecording, "terminal sessions are recorded and can be replayed (newest: %s)", in.live.LastRecording)
	}
	if in.run != nil {
		if in.auditProbeRuns > 0 {
			e.add(StatusPass, KindAudit, auditLink("compliance.probe_run", ""), "probe runs are audited (%d since %s)", in.auditProbeRuns, in.now.Add(-in.cfg.Window).Format(time.RFC3339))
		} else {
			e.add(StatusWarn, KindAudit, auditLink("compliance.probe_run", ""), "the latest probe run left no audit event")
		}
	}
	probe(in, e)
}

func evalCredentialsOutside(in inputs, e *eval) {
	if in.platform.SecretsEncrypted {
		e.add(StatusPass, KindPlatform, "/settings/secrets", "secrets are stored encrypted in the control plane's database, never in the VM; the egress gateway swaps a placeholder for the value only on the way to the secret's hosts, only where the secret may go (the Authorization header unless its owner says more)")
		e.add(StatusPass, KindPlatform, auditLink(audit.TypeEgressSecretReflected, ""), "every answer from a secret's hosts is scrubbed before the sandbox reads it: a real value in its headers or body (streamed, gzip, base64) is rewritten to the placeholder, counted and audited as %s", audit.TypeEgressSecretReflected)
		var echoable []string
		for _, sec := range in.secrets {
			if sec.State == secrets.StateActive && slices.ContainsFunc(sec.Inject, secrets.Echoable) {
				echoable = append(echoable, sec.Name+" ("+strings.Join(sec.Inject, ", ")+")")
			}
		}
		if len(echoable) > 0 {
			e.add(StatusPass, KindLive, "/settings/secrets", "secrets that may also go in a URL or request body, where an upstream may store or echo them: %s", strings.Join(echoable, "; "))
		}
	} else {
		e.add(StatusWarn, KindPlatform, "", "no secret store is configured: credentials can only reach sandboxes through their own environment")
	}
	probe(in, e, CheckCredentials)
}

// evalIncident passes only when someone is named to respond and a runbook
// says what they do, each from the tenant's policy or the platform's
// settings; the evidence says which is missing and where each comes from.
func evalIncident(in inputs, e *eval) {
	ir := in.pol.Doc.IncidentResponse
	inc := ResolveIncident(in.pol, in.platform)
	switch inc.ContactsFrom {
	case FromTenant:
		e.add(StatusPass, KindPolicy, policyLink(in.pol), "incident contacts from the tenant's policy (version %d): %s", in.pol.Version, strings.Join(inc.Contacts, ", "))
	case FromPlatform:
		e.add(StatusPass, KindPlatform, "", "incident contacts from the platform (STOCKADE_INCIDENT_CONTACTS; the policy, version %d, names none): %s", in.pol.Version, strings.Join(inc.Contacts, ", "))
	default:
		e.add(StatusWarn, KindPolicy, policyLink(in.pol), "no incident contact: neither the tenant's policy (version %d, incident_response.notify_emails) nor the platform (STOCKADE_INCIDENT_CONTACTS) names one", in.pol.Version)
	}
	switch inc.RunbookFrom {
	case FromTenant:
		e.add(StatusPass, KindPolicy, inc.RunbookURL, "the runbook for a compromised agent, from the tenant's policy (version %d): %s", in.pol.Version, inc.RunbookURL)
	case FromPlatform:
		e.add(StatusPass, KindPlatform, inc.RunbookURL, "the runbook for a compromised agent, from the platform (STOCKADE_INCIDENT_RUNBOOK_URL; the policy, version %d, links none): %s", in.pol.Version, inc.RunbookURL)
	default:
		e.add(StatusWarn, KindPolicy, policyLink(in.pol), "no runbook: neither the tenant's policy (version %d, incident_response.runbook_url) nor the platform (STOCKADE_INCIDENT_RUNBOOK_URL) links one", in.pol.Version)
	}
	e.add(StatusPass, KindPolicy, policyLink(in.pol), "on a denied connection the policy says: %s", ir.OnEgressDenied)
	e.add(StatusPass, KindPlatform, auditLink("tenant.", ""), "an operator can freeze the tenant: its sandboxes are destroyed, new ones refused, recordings and logs kept; freezes are audited")
	if in.live != nil {
		e.add(StatusPass, KindLive, "/egress?decision=deny", "%d denied connections since %s are logged for review", in.live.EgressDenied, in.live.Since.Format(time.RFC3339))
	}
	probe(in, e)
}
