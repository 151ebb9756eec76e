package compliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"gorm.io/gorm"
)

// resultRow is an Item as stored.
type resultRow struct {
	TenantID  string    `gorm:"column:tenant_id;primaryKey"`
	ItemID    string    `gorm:"column:item_id;primaryKey"`
	Status    string    `gorm:"column:status"`
	Evidence  string    `gorm:"column:evidence"`
	Since     time.Time `gorm:"column:since"`
	CheckedAt time.Time `gorm:"column:checked_at"`
}

func (resultRow) TableName() string { return "compliance_results" }

func (r resultRow) item() Item {
	var ev []Evidence
	_ = json.Unmarshal([]byte(r.Evidence), &ev)
	if ev == nil {
		ev = []Evidence{}
	}
	return Item{ID: r.ItemID, Question: Question(r.ItemID), Status: Status(r.Status), Evidence: ev,
		Since: r.Since.UTC(), CheckedAt: r.CheckedAt.UTC()}
}

// changeRow is a Change as stored.
type changeRow struct {
	ID         string    `gorm:"column:id;primaryKey"`
	TenantID   string    `gorm:"column:tenant_id"`
	ItemID     string    `gorm:"column:item_id"`
	FromStatus string    `gorm:"column:from_status"`
	ToStatus   string    `gorm:"column:to_status"`
	ChangedAt  time.Time `gorm:"column:changed_at"`
}

func (changeRow) TableName() string { return "compliance_changes" }

// runRow is a ProbeRun as stored.
type runRow struct {
	ID        string     `gorm:"column:id;primaryKey"`
	TenantID  string     `gorm:"column:tenant_id"`
	SandboxID string     `gorm:"column:sandbox_id"`
	State     string     `gorm:"column:state"`
	ActorKind string     `gorm:"column:actor_kind"`
	ActorID   string     `gorm:"column:actor_id"`
	ActorName string     `gorm:"column:actor_name"`
	StartedAt time.Time  `gorm:"column:started_at"`
	EndedAt   *time.Time `gorm:"column:ended_at"`
	Checks    string     `gorm:"column:checks"`
	Output    string     `gorm:"column:output"`
	Error     string     `gorm:"column:error"`
}

func (runRow) TableName() string { return "probe_runs" }

func (r runRow) run() ProbeRun {
	var cs []ProbeCheck
	_ = json.Unmarshal([]byte(r.Checks), &cs)
	if cs == nil {
		cs = []ProbeCheck{}
	}
	out := ProbeRun{ID: r.ID, TenantID: r.TenantID, SandboxID: r.SandboxID, State: r.State, StartedAt: r.StartedAt.UTC(),
		Checks: cs, Output: r.Output}
	if r.EndedAt != nil {
		t := r.EndedAt.UTC()
		out.EndedAt = &t
	}
	return out
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

// Limits of History and ProbeRuns.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

func clampLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultLimit
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

func (s *Service) results(ctx context.Context, tenantID string) ([]Item, error) {
	var rows []resultRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("read compliance results of tenant %s: %w", tenantID, err)
	}
	byID := make(map[string]resultRow, len(rows))
	for _, r := range rows {
		byID[r.ItemID] = r
	}
	out := make([]Item, 0, len(rows))
	for _, id := range ItemIDs() {
		if r, ok := byID[id]; ok {
			out = append(out, r.item())
		}
	}
	return out, nil
}

// History returns the tenant's status changes, newest first (at most
// limit; 0 means DefaultLimit).
func (s *Service) History(ctx context.Context, tenantID string, limit int) ([]Change, error) {
	var rows []changeRow
	err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("changed_at DESC, id DESC").
		Limit(clampLimit(limit)).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read compliance history of tenant %s: %w", tenantID, err)
	}
	out := make([]Change, len(rows))
	for i, r := range rows {
		out[i] = Change{ItemID: r.ItemID, From: Status(r.FromStatus), To: Status(r.ToStatus), At: r.ChangedAt.UTC()}
	}
	return out, nil
}

// ProbeRuns returns the tenant's probe runs, newest first (at most limit;
// 0 means DefaultLimit).
func (s *Service) ProbeRuns(ctx context.Context, tenantID string, limit int) ([]ProbeRun, error) {
	var rows []runRow
	err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("started_at DESC, id DESC").
		Limit(clampLimit(limit)).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("list probe runs of tenant %s: %w", tenantID, err)
	}
	out := make([]ProbeRun, len(rows))
	for i, r := range rows {
		out[i] = r.run()
	}
	return out, nil
}

// ProbeRun returns one probe run of the tenant; another tenant's is
// errdefs.ErrNotFound.
func (s *Service) ProbeRun(ctx context.Context, tenantID, id string) (ProbeRun, error) {
	var r runRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ProbeRun{}, fmt.Errorf("probe run %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return ProbeRun{}, fmt.Errorf("read probe run %s: %w", id, err)
	}
	return r.run(), nil
}

// latestRun is the tenant's newest probe run that ended, or nil.
func (s *Service) latestRun(ctx context.Context, tenantID string) (*ProbeRun, error) {
	var rows []runRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND state <> ?", tenantID, RunRunning).
		Order("started_at DESC, id DESC").Limit(1).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read latest probe run of tenant %s: %w", tenantID, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	r := rows[0].run()
	return &r, nil
}

// lastProbeStart is when the tenant's newest probe run started (zero: never).
func (s *Service) lastProbeStart(ctx context.Context, tenantID string) (time.Time, error) {
	var rows []runRow
	err := s.db.WithContext(ctx).Select("started_at").Where("tenant_id = ?", tenantID).
		Order("started_at DESC").Limit(1).Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return time.Time{}, err
	}
	return rows[0].StartedAt.UTC(), nil
}
