// Package audit is the append-only audit log: stable event codes, a Write
// that joins the caller's transaction, and filtered, paged reads. There are
// deliberately no update or delete operations.
package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// Actor kinds.
const (
	ActorUser      = "user"
	ActorToken     = "token"
	ActorSystem    = "system"
	ActorAnonymous = "anonymous"
)

// Outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
	// OutcomeDenied: a rule refused the action (a role, the egress policy).
	OutcomeDenied = "denied"
)

// Outcomes lists every outcome (filter menus, validation).
func Outcomes() []string { return []string{OutcomeSuccess, OutcomeFailure, OutcomeDenied} }

// DefaultOutcome is the outcome an event of eventType records when its
// writer names none: the type says it (auth.access_denied, egress.denied,
// auth.login_failed, sandbox.failed), else success.
func DefaultOutcome(eventType string) string {
	switch {
	case strings.HasSuffix(eventType, "denied"):
		return OutcomeDenied
	case strings.HasSuffix(eventType, "failed"):
		return OutcomeFailure
	}
	return OutcomeSuccess
}

// Actor is who did something, as the request layer knows it.
type Actor struct {
	Kind       string // user|token|system|anonymous
	ID         string
	Name       string
	RemoteAddr string
	RequestID  string
}

// Event is one audit record. TenantID "" marks a platform-level event.
// Its JSON (the exports) uses the snake_case names of the API.
type Event struct {
	ID         string         `gorm:"primaryKey" json:"id"`
	TenantID   string         `gorm:"column:tenant_id" json:"tenant_id"`
	Time       time.Time      `gorm:"column:occurred_at" json:"time"`
	Code       string         `json:"code"`
	Type       string         `json:"type"`
	ActorKind  string         `json:"actor_kind"`
	ActorID    string         `json:"actor_id"`
	ActorName  string         `json:"actor_name"`
	TargetKind string         `json:"target_kind"`
	TargetID   string         `json:"target_id"`
	Outcome    string         `json:"outcome"`                        // success|failure|denied
	Details    map[string]any `gorm:"serializer:json" json:"details"` // names and values, never secrets
	RemoteAddr string         `json:"remote_addr"`
	RequestID  string         `json:"request_id"`
}

// TableName is the GORM table of Event.
func (Event) TableName() string { return "audit_events" }

// AfterFind keeps times in UTC whatever the driver's parsing did.
func (e *Event) AfterFind(*gorm.DB) error {
	e.Time = e.Time.UTC()
	return nil
}

// Event makes an event done by a, with a's address and request id.
func (a Actor) Event(tenantID, eventType, targetKind, targetID string, details map[string]any) Event {
	return Event{
		TenantID:   tenantID,
		Type:       eventType,
		ActorKind:  a.Kind,
		ActorID:    a.ID,
		ActorName:  a.Name,
		TargetKind: targetKind,
		TargetID:   targetID,
		Outcome:    DefaultOutcome(eventType),
		Details:    details,
		RemoteAddr: a.RemoteAddr,
		RequestID:  a.RequestID,
	}
}

// secretKey reports whether a detail key names a secret value: a guard
// against a caller passing a token or password by accident. Names of secrets
// ("secret_name") stay allowed.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	switch k {
	case "secret", "password", "passwd", "private_key", "hash", "api_key", "token_secret":
		return true
	}
	return strings.HasSuffix(k, "_secret") || strings.HasSuffix(k, "_password")
}

// Write inserts e using tx, so callers can record an event in the same
// transaction as the change it describes. It fills ID (UUIDv7), Time (now,
// UTC), Code (from the type) and Outcome (DefaultOutcome) when empty.
func Write(tx *gorm.DB, e Event) error {
	if err := complete(&e, time.Now); err != nil {
		return err
	}
	if err := tx.Create(&e).Error; err != nil {
		return fmt.Errorf("write audit event %s: %w", e.Type, err)
	}
	return nil
}

func complete(e *Event, now func() time.Time) error {
	code, ok := Code(e.Type)
	if !ok {
		return fmt.Errorf("audit event type %q has no code", e.Type)
	}
	if e.Code == "" {
		e.Code = code
	} else if e.Code != code {
		return fmt.Errorf("audit event type %q has code %s, not %s", e.Type, code, e.Code)
	}
	switch e.ActorKind {
	case ActorUser, ActorToken, ActorSystem, ActorAnonymous:
	default:
		return fmt.Errorf("audit event %s: actor kind %q is not user, token, system or anonymous", e.Type, e.ActorKind)
	}
	if e.Outcome == "" {
		e.Outcome = DefaultOutcome(e.Type)
	}
	if e.Outcome != OutcomeSuccess && e.Outcome != OutcomeFailure && e.Outcome != OutcomeDenied {
		return fmt.Errorf("audit event %s: outcome %q is not success, failure or denied", e.Type, e.Outcome)
	}
	for k := range e.Details {
		if secretKey(k) {
			return fmt.Errorf("audit event %s: detail %q looks like a secret; record names only", e.Type, k)
		}
	}
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("audit event id: %w", err)
		}
		e.ID = id.String()
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	// PostgreSQL keeps microseconds; truncating here makes both databases
	// return exactly what was written.
	e.Time = e.Time.UTC().Truncate(time.Microsecond)
	return nil
}

// Log reads and appends audit events outside other transactions.
type Log struct {
	db       *gorm.DB
	clock    func() time.Time
	pageSize int
}

// NewLog returns a Log on db. A nil clock means time.Now.
func NewLog(db *gorm.DB, clock func() time.Time) *Log {
	if clock == nil {
		clock = time.Now
	}
	return &Log{db: db, clock: clock, pageSize: 500}
}

// Record appends e in its own transaction (for events with no accompanying
// change, like a failed login).
func (l *Log) Record(ctx context.Context, e Event) error {
	if err := complete(&e, l.clock); err != nil {
		return err
	}
	if err := l.db.WithContext(ctx).Create(&e).Error; err != nil {
		return fmt.Errorf("record audit event %s: %w", e.Type, err)
	}
	return nil
}

// Filter selects events. Zero fields match everything.
type Filter struct {
	Type    string // exact type, or a prefix when it ends in "." ("member.")
	ActorID string
	Outcome string
	Query   string    // case-insensitive substring of type, code, actor, target or details
	Since   time.Time // inclusive
	Until   time.Time // exclusive
	Before  string    // cursor: only events older than this event id
	Limit   int       // List only: default 100, at most 1000
}

// Page size limits for List.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ErrBadFilter is returned for a malformed filter (bad cursor).
var ErrBadFilter = errors.New("bad audit filter")

func (l *Log) query(ctx context.Context, tenantID string, f Filter) (*gorm.DB, error) {
	q := l.db.WithContext(ctx).Model(&Event{}).Where("tenant_id = ?", tenantID)
	if f.Type != "" {
		if strings.HasSuffix(f.Type, ".") {
			q = q.Where("type LIKE ? ESCAPE '\\'", likeEscape(f.Type)+"%")
		} else {
			q = q.Where("type = ?", f.Type)
		}
	}
	if f.ActorID != "" {
		q = q.Where("actor_id = ?", f.ActorID)
	}
	if f.Outcome != "" {
		q = q.Where("outcome = ?", f.Outcome)
	}
	if f.Query != "" {
		q = q.Where("lower(type || ' ' || code || ' ' || actor_id || ' ' || actor_name || ' ' || target_kind || ' ' || target_id || ' ' || details) LIKE ? ESCAPE '\\'",
			"%"+likeEscape(strings.ToLower(f.Query))+"%")
	}
	if !f.Since.IsZero() {
		q = q.Where("occurred_at >= ?", f.Since.UTC())
	}
	if !f.Until.IsZero() {
		q = q.Where("occurred_at < ?", f.Until.UTC())
	}
	if f.Before != "" {
		if _, err := uuid.Parse(f.Before); err != nil {
			return nil, fmt.Errorf("%w: cursor %q is not an event id", ErrBadFilter, f.Before)
		}
		q = q.Where("id < ?", f.Before)
	}
	return q, nil
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// List returns the tenant's matching events, newest first. Pass the last
// event's ID as Filter.Before to get the next page.
func (l *Log) List(ctx context.Context, tenantID string, f Filter) ([]Event, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	if limit > MaxLimit {
		limit = MaxLimit
	}
	q, err := l.query(ctx, tenantID, f)
	if err != nil {
		return nil, err
	}
	var out []Event
	if err := q.Order("id DESC").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list audit events: %w", err)
	}
	return out, nil
}

// Stream calls fn with every matching event, oldest first, reading a page
// of rows at a time so an export never holds the whole log in memory.
// Filter.Limit is ignored. An error from fn stops the stream and is returned.
func (l *Log) Stream(ctx context.Context, tenantID string, f Filter, fn func(Event) error) error {
	after := ""
	for {
		q, err := l.query(ctx, tenantID, f)
		if err != nil {
			return err
		}
		if after != "" {
			q = q.Where("id > ?", after)
		}
		page := make([]Event, 0, l.pageSize)
		if err := q.Order("id ASC").Limit(l.pageSize).Find(&page).Error; err != nil {
			return fmt.Errorf("stream audit events: %w", err)
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(page) < l.pageSize {
			return nil
		}
		after = page[len(page)-1].ID
	}
}
