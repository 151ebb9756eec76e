package sandbox

import (
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// Outbox records an event for the tenant's outgoing webhooks inside the
// transaction of the change it reports, so a webhook never announces a
// change that rolled back nor misses one that committed
// (*integrations.Store).
type Outbox interface {
	Add(tx *gorm.DB, tenantID, eventType string, data any) error
}

// Lifecycle event types (integrations.EventSandbox*).
const (
	EventCreated   = "sandbox.created"
	EventDestroyed = "sandbox.destroyed"
)

// CreatedEvent is the data of sandbox.created.
type CreatedEvent struct {
	SandboxID      string            `json:"sandbox_id"`
	Template       string            `json:"template"`
	VCPUs          int               `json:"vcpus"`
	MemoryMiB      int               `json:"memory_mib"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	CreatedBy      string            `json:"created_by"`
	CreatedAt      time.Time         `json:"created_at"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

// DestroyedEvent is the data of sandbox.destroyed: sent when a sandbox ends
// for good, destroyed or failed (State says which), with why and what it
// used.
type DestroyedEvent struct {
	SandboxID string     `json:"sandbox_id"`
	State     State      `json:"state"`
	Reason    string     `json:"reason"`
	Template  string     `json:"template"`
	VCPUs     int        `json:"vcpus"`
	MemoryMiB int        `json:"memory_mib"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Usage     UsageTotal `json:"usage"`
}

// UsageTotal is a sandbox's whole usage from the ledger, priced.
type UsageTotal struct {
	VCPUSeconds     float64 `json:"vcpu_seconds"`
	GiBSeconds      float64 `json:"gib_seconds"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	WallSeconds     float64 `json:"wall_seconds"`
	EgressUpBytes   int64   `json:"egress_up_bytes"`
	EgressDownBytes int64   `json:"egress_down_bytes"`
	EgressBytes     int64   `json:"egress_bytes"`
	Cost            float64 `json:"cost"`
	Currency        string  `json:"currency"`
}

// announce writes the lifecycle event of sb's new state, if it has one,
// inside tx (after its meter was closed there, for an end).
func (s *Store) announce(tx *gorm.DB, sb Sandbox) error {
	if s.outbox == nil {
		return nil
	}
	switch {
	case sb.State == StateCreating:
		return s.outbox.Add(tx, sb.TenantID, EventCreated, CreatedEvent{SandboxID: sb.ID, Template: sb.Template, VCPUs: sb.VCPUs,
			MemoryMiB: sb.MemoryMiB, TimeoutSeconds: sb.TimeoutSeconds, CreatedBy: sb.CreatedByName, CreatedAt: sb.CreatedAt,
			Metadata: sb.Metadata()})
	case sb.State.Ended():
		u, err := usageOf(tx, sb)
		if err != nil {
			return err
		}
		return s.outbox.Add(tx, sb.TenantID, EventDestroyed, DestroyedEvent{SandboxID: sb.ID, State: sb.State, Reason: sb.StateReason,
			Template: sb.Template, VCPUs: sb.VCPUs, MemoryMiB: sb.MemoryMiB, CreatedAt: sb.CreatedAt, StartedAt: sb.StartedAt,
			EndedAt: sb.EndedAt, Usage: u})
	}
	return nil
}

// usageOf totals the sandbox's ledger inside tx, each hour at the price in
// force then.
func usageOf(tx *gorm.DB, sb Sandbox) (UsageTotal, error) {
	ctx := tx.Statement.Context
	us := usage.NewStore(tx, nil)
	entries, err := us.Entries(ctx, sb.TenantID, sb.ID)
	if err != nil {
		return UsageTotal{}, err
	}
	prices, err := us.LoadPrices(ctx)
	if err != nil {
		return UsageTotal{}, err
	}
	var (
		sum  usage.Sums
		cost usage.Money
	)
	cur := prices.At(sb.TenantID, sb.CreatedAt).Currency
	for _, e := range entries {
		s := usage.Sums{AllocVCPUMS: e.AllocVCPUMS, AllocMiBMS: e.AllocMiBMS, WallMS: e.WallMS, CPUNS: e.CPUNS,
			EgressUpBytes: e.EgressUpBytes, EgressDownBytes: e.EgressDownBytes}
		p := prices.At(sb.TenantID, e.PeriodStart)
		cost = cost.Add(s.Charge(p))
		cur = p.Currency
		sum.Add(s)
	}
	return UsageTotal{VCPUSeconds: sum.VCPUSeconds(), GiBSeconds: sum.GiBSeconds(), CPUSeconds: sum.CPUSeconds(),
		WallSeconds: sum.WallSeconds(), EgressUpBytes: sum.EgressUpBytes, EgressDownBytes: sum.EgressDownBytes,
		EgressBytes: sum.EgressBytes(), Cost: cost.Float64(), Currency: cur}, nil
}
