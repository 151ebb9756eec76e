package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Session is one terminal session as stored: the index of its recording.
type Session struct {
	ID             string     `gorm:"column:id;primaryKey"`
	TenantID       string     `gorm:"column:tenant_id"`
	SandboxID      string     `gorm:"column:sandbox_id"`
	OpenedBy       string     `gorm:"column:opened_by"`
	OpenedByName   string     `gorm:"column:opened_by_name"`
	OpenedByKind   string     `gorm:"column:opened_by_kind"`
	ArgvJSON       string     `gorm:"column:argv"`
	Cols           int        `gorm:"column:cols"`
	Rows           int        `gorm:"column:rows"`
	StartedAt      time.Time  `gorm:"column:started_at"`
	EndedAt        *time.Time `gorm:"column:ended_at"`
	EndReason      string     `gorm:"column:end_reason"`
	ExitCode       *int       `gorm:"column:exit_code"`
	BytesOut       int64      `gorm:"column:bytes_out"`
	BytesIn        int64      `gorm:"column:bytes_in"`
	RecordInput    bool       `gorm:"column:record_input"`
	Recording      string     `gorm:"column:recording"` // relative to the data dir; "" once purged
	RecordingBytes int64      `gorm:"column:recording_bytes"`
	Dropped        int64      `gorm:"column:dropped"`
	DroppedBytes   int64      `gorm:"column:dropped_bytes"`
	// RecordingTruncated says where and why the recording stopped at a cap
	// ("" when it did not); TruncatedBytes is the output left out after it.
	RecordingTruncated string     `gorm:"column:recording_truncated"`
	TruncatedBytes     int64      `gorm:"column:truncated_bytes"`
	WatchersCut        int        `gorm:"column:watchers_cut"`
	RetentionDays      int        `gorm:"column:retention_days"`
	PurgedAt           *time.Time `gorm:"column:purged_at"`
	SeenAt             time.Time  `gorm:"column:seen_at"`
}

// TableName is the GORM table of Session.
func (Session) TableName() string { return "terminal_sessions" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (s *Session) AfterFind(*gorm.DB) error {
	s.StartedAt, s.SeenAt = s.StartedAt.UTC(), s.SeenAt.UTC()
	for _, p := range []**time.Time{&s.EndedAt, &s.PurgedAt} {
		if *p != nil {
			u := (*p).UTC()
			*p = &u
		}
	}
	return nil
}

// Live reports whether the session has not ended.
func (s Session) Live() bool { return s.EndedAt == nil }

// Argv is the command the terminal runs.
func (s Session) Argv() []string {
	var out []string
	_ = json.Unmarshal([]byte(s.ArgvJSON), &out)
	return out
}

// ExpiresAt is when retention removes the recording.
func (s Session) ExpiresAt() time.Time {
	from := s.StartedAt
	if s.EndedAt != nil {
		from = *s.EndedAt
	}
	return from.AddDate(0, 0, s.RetentionDays)
}

// Store keeps the terminal sessions of every tenant.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
}

// NewStore returns a store on db (migrated).
func NewStore(db *gorm.DB, clock func() time.Time) *Store {
	return &Store{db: db, clock: clock}
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return errdefs.ErrNotFound
	}
	return err
}

func (s *Store) audit(tx *gorm.DB, e audit.Event) error {
	e.Time = s.clock.Now()
	return audit.Write(tx, e)
}

// create records a session just opened, audited terminal.opened.
func (s *Store) create(ctx context.Context, actor audit.Actor, sess *Session) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(sess).Error; err != nil {
			return err
		}
		return s.audit(tx, actor.Event(sess.TenantID, audit.TypeTerminalOpened, "terminal", sess.ID, map[string]any{
			"sandbox": sess.SandboxID, "argv": sess.Argv(), "cols": sess.Cols, "rows": sess.Rows,
			"record_input": sess.RecordInput, "retention_days": sess.RetentionDays,
		}))
	})
	if err != nil {
		return fmt.Errorf("record terminal session in sandbox %s: %w", sess.SandboxID, err)
	}
	return nil
}

// record writes one audit event about a session.
func (s *Store) record(ctx context.Context, e audit.Event) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return s.audit(tx, e) })
}

// SystemActor is who the service's own decisions are recorded as.
func SystemActor() audit.Actor {
	return audit.Actor{Kind: audit.ActorSystem, ID: "terminals", Name: "terminal service"}
}

// finish records how a session ended, audited terminal.closed, unless it
// was recorded ended already.
func (s *Store) finish(ctx context.Context, sess Session, e End) error {
	set := map[string]any{
		"ended_at": e.At.UTC().Truncate(time.Microsecond), "end_reason": truncate(e.Reason, 500), "bytes_out": e.BytesOut,
		"bytes_in": e.BytesIn, "recording_bytes": e.Record.Bytes, "dropped": e.Record.Dropped, "dropped_bytes": e.Record.DroppedBytes,
		"watchers_cut": e.Cut, "seen_at": s.clock.Now(), "recording_truncated": truncate(e.Record.Truncated, 500),
		"truncated_bytes": e.Record.TruncatedBytes,
	}
	if e.Exit != nil {
		set["exit_code"] = e.Exit.Code
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Session{}).Where("id = ? AND ended_at IS NULL", sess.ID).Updates(set)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		details := map[string]any{"sandbox": sess.SandboxID, "reason": e.Reason, "bytes_out": e.BytesOut, "bytes_in": e.BytesIn,
			"recording_bytes": e.Record.Bytes, "dropped": e.Record.Dropped, "watchers_cut": e.Cut,
			"duration_ms": e.At.Sub(sess.StartedAt).Milliseconds()}
		if e.Exit != nil {
			details["exit_code"] = e.Exit.Code
		}
		if e.Record.Truncated != "" {
			details["recording_truncated"] = e.Record.Truncated
		}
		return s.audit(tx, SystemActor().Event(sess.TenantID, audit.TypeTerminalClosed, "terminal", sess.ID, details))
	})
	if err != nil {
		return fmt.Errorf("record end of terminal session %s: %w", sess.ID, err)
	}
	return nil
}

// Session returns the tenant's session with that id.
func (s *Store) Session(ctx context.Context, tenantID, id string) (Session, error) {
	var out Session
	if err := s.db.WithContext(ctx).Take(&out, "tenant_id = ? AND id = ?", tenantID, id).Error; err != nil {
		return Session{}, fmt.Errorf("terminal session %s: %w", id, notFound(err))
	}
	return out, nil
}

// sessionListLimit bounds a list of sessions.
const sessionListLimit = 200

// Sessions returns the tenant's most recent sessions, newest first; with
// sandboxID not empty, that sandbox's only.
func (s *Store) Sessions(ctx context.Context, tenantID, sandboxID string) ([]Session, error) {
	q := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID)
	if sandboxID != "" {
		q = q.Where("sandbox_id = ?", sandboxID)
	}
	var out []Session
	if err := q.Order("started_at DESC, id DESC").Limit(sessionListLimit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("terminal sessions of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// seen refreshes the live sessions this process holds.
func (s *Store) seen(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.db.WithContext(ctx).Model(&Session{}).Where("id IN ? AND ended_at IS NULL", ids).Update("seen_at", s.clock.Now()).Error; err != nil {
		return fmt.Errorf("refresh live terminal sessions: %w", err)
	}
	return nil
}

// stale returns live sessions not seen since before: their server is gone.
func (s *Store) stale(ctx context.Context, before time.Time) ([]Session, error) {
	var out []Session
	if err := s.db.WithContext(ctx).Where("ended_at IS NULL AND seen_at < ?", before.UTC()).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("lost terminal sessions: %w", err)
	}
	return out, nil
}

// expired returns ended sessions whose recording is past its retention.
func (s *Store) expired(ctx context.Context, now time.Time) ([]Session, error) {
	var cands []Session
	err := s.db.WithContext(ctx).Where("ended_at IS NOT NULL AND purged_at IS NULL").Order("ended_at").Limit(1000).Find(&cands).Error
	if err != nil {
		return nil, fmt.Errorf("expired recordings: %w", err)
	}
	var out []Session
	for _, c := range cands {
		if !c.ExpiresAt().After(now) {
			out = append(out, c)
		}
	}
	return out, nil
}

// recordingBytes is what the tenant's ended sessions' recordings hold on
// disk (purged ones hold nothing).
func (s *Store) recordingBytes(ctx context.Context, tenantID string) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&Session{}).Select("COALESCE(SUM(recording_bytes), 0)").
		Where("tenant_id = ? AND ended_at IS NOT NULL AND recording <> ''", tenantID).Scan(&n).Error
	if err != nil {
		return 0, fmt.Errorf("recording bytes of tenant %s: %w", tenantID, err)
	}
	return n, nil
}

// purged records that a session's recording was removed.
func (s *Store) purged(ctx context.Context, id string) error {
	err := s.db.WithContext(ctx).Model(&Session{}).Where("id = ?", id).Updates(map[string]any{"purged_at": s.clock.Now(), "recording": ""}).Error
	if err != nil {
		return fmt.Errorf("record purge of recording %s: %w", id, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	b, _ := splitUTF8([]byte(s[:n]))
	return string(b)
}
