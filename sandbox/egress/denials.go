package egress

import (
	"context"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// Auditor records audit events; *audit.Log implements it.
type Auditor interface {
	Record(ctx context.Context, e audit.Event) error
}

// AuditActorID is the audit actor of the gateway's decisions.
const AuditActorID = "egress-gateway"

// denialKey is one sandbox asking for one host.
type denialKey struct{ sandbox, host string }

type denialWindow struct {
	until      time.Time // no new event for this key before then
	suppressed int       // denials folded into the next event
}

// denials rate-limits the audit events of denied connections: at most one
// per sandbox and host per window, so a loop cannot flood the audit log.
// Every denial is still in egress_events; the next audit event counts the
// ones folded in.
type denials struct {
	window time.Duration
	mu     sync.Mutex
	m      map[denialKey]*denialWindow
}

func newDenials(window time.Duration) *denials {
	return &denials{window: window, m: map[denialKey]*denialWindow{}}
}

// admit reports whether a denial at now gets an audit event, and how many
// earlier ones it stands for.
func (d *denials) admit(sandboxID, host string, now time.Time) (bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := denialKey{sandboxID, host}
	w := d.m[k]
	if w != nil && now.Before(w.until) {
		w.suppressed++
		return false, 0
	}
	suppressed := 0
	if w != nil {
		suppressed = w.suppressed
	}
	d.m[k] = &denialWindow{until: now.Add(d.window)}
	// Keys whose window has passed with nothing folded in are forgotten,
	// so the map stays as small as the recent denials.
	if len(d.m) > 1024 {
		for key, x := range d.m {
			if !now.Before(x.until) && x.suppressed == 0 {
				delete(d.m, key)
			}
		}
	}
	return true, suppressed
}

// forget drops a sandbox's windows (it ended).
func (d *denials) forget(sandboxID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.m {
		if k.sandbox == sandboxID {
			delete(d.m, k)
		}
	}
}

// auditDenial records egress.denied for a refused connection, rate-limited.
func (g *Gateway) auditDenial(ctx context.Context, ev Event) {
	if g.cfg.Audit == nil {
		return
	}
	ok, suppressed := g.denials.admit(ev.SandboxID, ev.Host, g.cfg.Clock())
	if !ok {
		return
	}
	a := audit.Actor{Kind: audit.ActorSystem, ID: AuditActorID, Name: "egress gateway"}
	e := a.Event(ev.TenantID, audit.TypeEgressDenied, "sandbox", ev.SandboxID, map[string]any{
		"host": ev.Host, "port": ev.Port, "method": ev.Method, "rule": ev.Rule, "vm": ev.VMID,
		"policy_version": ev.PolicyVersion, "egress_event": ev.ID, "suppressed": suppressed,
	})
	e.Outcome = audit.OutcomeDenied
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.cfg.Audit.Record(rctx, e); err != nil {
		g.log.Error("audit egress denial", "tenant", ev.TenantID, "sandbox", ev.SandboxID, "err", err)
	}
}
