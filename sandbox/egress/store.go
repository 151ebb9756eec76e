package egress

import (
	"context"
	"fmt"
	"strings"
	"time"

	textclip "github.com/stockade-dev/stockade/tenants/clip"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/usage"
)

// Decisions recorded in Event.Decision.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Event is one connection through the gateway, as stored in egress_events.
type Event struct {
	ID            string    `gorm:"column:id;primaryKey" json:"id"`
	TenantID      string    `gorm:"column:tenant_id" json:"-"`
	SandboxID     string    `gorm:"column:sandbox_id" json:"sandbox_id"`
	VMID          string    `gorm:"column:vm_id" json:"vm_id"`
	Method        string    `gorm:"column:method" json:"method"`
	Host          string    `gorm:"column:host" json:"host"`
	Port          int       `gorm:"column:port" json:"port"`
	Decision      string    `gorm:"column:decision" json:"decision"`
	Rule          string    `gorm:"column:rule" json:"rule"`
	Addr          string    `gorm:"column:addr" json:"addr,omitempty"`
	PolicyVersion int       `gorm:"column:policy_version" json:"policy_version"`
	Intercepted   bool      `gorm:"column:intercepted" json:"intercepted"`
	Status        int       `gorm:"column:status" json:"status,omitempty"`
	Error         string    `gorm:"column:error" json:"error,omitempty"`
	BytesUp       int64     `gorm:"column:bytes_up" json:"bytes_up"`
	BytesDown     int64     `gorm:"column:bytes_down" json:"bytes_down"`
	StartedAt     time.Time `gorm:"column:started_at" json:"started_at"`
	DurationMS    int64     `gorm:"column:duration_ms" json:"duration_ms"`
	// Suppressed counts the sandbox's connections since its previous row
	// that the rate limit kept out of the table (metered all the same).
	Suppressed int `gorm:"column:suppressed" json:"suppressed,omitempty"`
	// SecretsReflected counts real secret values rewritten to placeholders
	// in the connection's responses.
	SecretsReflected int64 `gorm:"column:secrets_reflected" json:"secrets_reflected"`

	// unmetered: the connection is not billed to SandboxID (the guest
	// named a sandbox that is not its own).
	unmetered bool
}

// Bounds of the text fields of an event: everything in one comes from a
// sandbox one way or another (a 64 KiB request line quoted in an error).
const (
	maxIDLen    = 64
	maxMethod   = 32
	maxHostLen  = 255
	maxRuleLen  = 300
	maxAddrLen  = 64
	maxErrorLen = 512
)

// bound clips every text field to its bound, as valid UTF-8 (PostgreSQL
// refuses anything else, and the row would be lost).
func (e *Event) bound() {
	e.SandboxID = clip(e.SandboxID, maxIDLen)
	e.VMID = clip(e.VMID, maxIDLen)
	e.Method = clip(e.Method, maxMethod)
	e.Host = clip(e.Host, maxHostLen)
	e.Rule = clip(e.Rule, maxRuleLen)
	e.Addr = clip(e.Addr, maxAddrLen)
	e.Error = clip(e.Error, maxErrorLen)
}

// clip makes s valid UTF-8 without NUL bytes and at most n bytes long,
// marking a cut with "…".
func clip(s string, n int) string { return textclip.String(strings.ReplaceAll(s, "\x00", ""), n) }

// TableName is the GORM table of Event.
func (Event) TableName() string { return "egress_events" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (e *Event) AfterFind(*gorm.DB) error {
	e.StartedAt = e.StartedAt.UTC()
	return nil
}

// Store keeps egress events (tenant-scoped: every read takes the tenant).
type Store struct {
	db *gorm.DB
}

// NewStore returns a store on db (migrated).
func NewStore(db *gorm.DB) *Store { return &Store{db: db} }

// Record stores one event; it fills ID.
func (s *Store) Record(ctx context.Context, e *Event) error {
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("record egress event: %w", err)
		}
		e.ID = id.String()
	}
	e.StartedAt = e.StartedAt.UTC().Truncate(time.Microsecond)
	e.bound()
	// The bytes go into the usage ledger with the event, once: a connection
	// is metered exactly when it is recorded.
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(e).Error; err != nil {
			return err
		}
		if e.unmetered {
			return nil
		}
		end := e.StartedAt.Add(time.Duration(e.DurationMS) * time.Millisecond)
		return usage.Egress(tx, e.TenantID, e.SandboxID, e.BytesUp, e.BytesDown, end)
	})
	if err != nil {
		return fmt.Errorf("record egress event: %w", err)
	}
	return nil
}

// Meter puts a connection's bytes into the usage ledger without an event
// row: for a connection the rate limit keeps out of egress_events.
func (s *Store) Meter(ctx context.Context, tenantID, sandboxID string, up, down int64, at time.Time) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return usage.Egress(tx, tenantID, sandboxID, up, down, at.UTC().Truncate(time.Microsecond))
	})
	if err != nil {
		return fmt.Errorf("meter egress of sandbox %s: %w", sandboxID, err)
	}
	return nil
}

// pruneBatch bounds the rows one statement of Prune deletes, so neither
// database holds a long transaction over a big table.
const pruneBatch = 5000

// Prune deletes every tenant's events that started before before and
// returns how many; the usage ledger keeps their bytes.
func (s *Store) Prune(ctx context.Context, before time.Time) (int64, error) {
	cutoff := before.UTC().Truncate(time.Microsecond)
	var total int64
	for {
		res := s.db.WithContext(ctx).Where("id IN (?)",
			s.db.Model(&Event{}).Select("id").Where("started_at < ?", cutoff).Limit(pruneBatch)).Delete(&Event{})
		if res.Error != nil {
			return total, fmt.Errorf("prune egress events before %s: %w", cutoff.Format(time.RFC3339), res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < pruneBatch {
			return total, nil
		}
	}
}

// Filter narrows Events.
type Filter struct {
	SandboxID string
	// SandboxShort matches the sandbox whose id is it or ends with it (the
	// short id the pages show); hex digits and dashes only.
	SandboxShort string
	// Decision is DecisionAllow, DecisionDeny or "" for both.
	Decision string
	// Limit bounds the list; 0 or over MaxEvents means MaxEvents.
	Limit int
}

// MaxEvents bounds one list of events.
const MaxEvents = 500

// Events returns the tenant's most recent events, newest first.
func (s *Store) Events(ctx context.Context, tenantID string, f Filter) ([]Event, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if f.SandboxID != "" {
		q = q.Where("sandbox_id = ?", f.SandboxID)
	}
	if f.SandboxShort != "" {
		if strings.Trim(f.SandboxShort, "0123456789abcdef-") != "" {
			return nil, fmt.Errorf("egress events of tenant %s: short sandbox id %q is not hex", tenantID, f.SandboxShort)
		}
		q = q.Where("(sandbox_id = ? OR sandbox_id LIKE ?)", f.SandboxShort, "%"+f.SandboxShort)
	}
	if f.Decision != "" {
		q = q.Where("decision = ?", f.Decision)
	}
	limit := f.Limit
	if limit <= 0 || limit > MaxEvents {
		limit = MaxEvents
	}
	out := []Event{}
	if err := q.Order("started_at DESC, id DESC").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("egress events of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// Totals is what a sandbox moved through the gateway.
type Totals struct {
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
}

// SandboxTotals sums a sandbox's events (finished connections).
func (s *Store) SandboxTotals(ctx context.Context, tenantID, sandboxID string) (Totals, error) {
	var rows []struct {
		Decision  string
		N         int64
		BytesUp   int64
		BytesDown int64
	}
	err := s.db.WithContext(ctx).Model(&Event{}).
		Select("decision, COUNT(*) AS n, COALESCE(SUM(bytes_up), 0) AS bytes_up, COALESCE(SUM(bytes_down), 0) AS bytes_down").
		Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Group("decision").Scan(&rows).Error
	if err != nil {
		return Totals{}, fmt.Errorf("egress totals of sandbox %s: %w", sandboxID, err)
	}
	var t Totals
	for _, r := range rows {
		if r.Decision == DecisionAllow {
			t.Allowed = r.N
		} else {
			t.Denied += r.N
		}
		t.BytesUp += r.BytesUp
		t.BytesDown += r.BytesDown
	}
	return t, nil
}
