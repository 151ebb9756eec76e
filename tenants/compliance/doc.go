// Package compliance answers, per tenant, the security checklist for running
// autonomous agents, with evidence rather than promises. Each item is
// evaluated from the tenant's current policy, the platform configuration,
// live data of its sandboxes, terminals and audit log, and the latest run of
// the probe: a program run inside a real sandbox of the tenant that tries
// each escape the checklist asks about. Results, their status changes and
// the probe runs are stored (compliance_results, compliance_changes,
// probe_runs); a cycle re-evaluates every tenant and probes it on a schedule.
//
// This package never calls sandbox/: the probe runs through a Prober and
// live data come through Live, both implemented in sandbox/probe.
package compliance
