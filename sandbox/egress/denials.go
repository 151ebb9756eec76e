package egress

import (
	"context"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// Auditor records audit events; *audit.Log implements it.
type Auditor interface {
	Record(ctx context.Context, e audit.Event) error
}

// AuditActorID is the audit actor of the gateway's decisions.
const AuditActorID = "egress-gateway"

// denialKey is one sandbox (or the VM, for a sandbox the guest made up)
// asking for one host, for the audit limiter.
func denialKey(key, host string) string { return key + "\x00" + host }

// auditDenial records egress.denied for a refused connection, rate-limited
// under key (conn.limitKey).
func (g *Gateway) auditDenial(ctx context.Context, ev Event, key string) {
	if g.cfg.Audit == nil {
		return
	}
	ok, suppressed := g.denials.Admit(denialKey(key, ev.Host), g.cfg.Clock.Now())
	if !ok {
		return
	}
	g.writeAudit(ctx, ev, audit.TypeEgressDenied, map[string]any{
		"host": ev.Host, "port": ev.Port, "method": ev.Method, "rule": ev.Rule, "vm": ev.VMID,
		"policy_version": ev.PolicyVersion, "egress_event": ev.ID, "suppressed": suppressed,
	})
}

// writeAudit records one of the gateway's audit events about ev's sandbox,
// outcome denied (the gateway refused a connection, or a value).
func (g *Gateway) writeAudit(ctx context.Context, ev Event, typ string, details map[string]any) {
	a := audit.Actor{Kind: audit.ActorSystem, ID: AuditActorID, Name: "egress gateway"}
	e := a.Event(ev.TenantID, typ, "sandbox", ev.SandboxID, details)
	e.Outcome = audit.OutcomeDenied
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.cfg.Audit.Record(rctx, e); err != nil {
		g.log.Error("audit "+typ, "tenant", ev.TenantID, "sandbox", ev.SandboxID, "err", err)
	}
}
