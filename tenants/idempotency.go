package tenants

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"gorm.io/gorm"
)

// IdempotencyTTL is how long a create's Idempotency-Key is remembered.
const IdempotencyTTL = 24 * time.Hour

// Idempotency key states.
const (
	IdemPending = "pending" // the first request runs (in the server named by Owner)
	IdemDone    = "done"    // its answer is stored
)

// IdemKey is one remembered Idempotency-Key: the first request that came
// with it and, once it finished, its answer.
type IdemKey struct {
	ID           string     `gorm:"column:id;primaryKey"`
	TenantID     string     `gorm:"column:tenant_id"`
	Principal    string     `gorm:"column:principal"` // the token or user that sent it
	Key          string     `gorm:"column:idem_key"`
	Route        string     `gorm:"column:route"` // method and route template
	RequestHash  string     `gorm:"column:request_hash"`
	State        string     `gorm:"column:state"`
	Owner        string     `gorm:"column:owner"` // the server process that runs it
	StatusCode   int        `gorm:"column:status_code"`
	Location     string     `gorm:"column:location"`
	ResponseBody string     `gorm:"column:response_body"`
	Sealed       bool       `gorm:"column:sealed"` // ResponseBody is encrypted (it holds a secret)
	CreatedAt    time.Time  `gorm:"column:created_at"`
	CompletedAt  *time.Time `gorm:"column:completed_at"`
	ExpiresAt    time.Time  `gorm:"column:expires_at"`
}

// TableName is the GORM table of IdemKey.
func (IdemKey) TableName() string { return "idempotency_keys" }

// AfterFind keeps times in UTC whatever the driver parsed.
func (k *IdemKey) AfterFind(*gorm.DB) error {
	k.CreatedAt, k.ExpiresAt = k.CreatedAt.UTC(), k.ExpiresAt.UTC()
	if k.CompletedAt != nil {
		u := k.CompletedAt.UTC()
		k.CompletedAt = &u
	}
	return nil
}

// IdemRequest is a request that came with an Idempotency-Key.
type IdemRequest struct {
	TenantID, Principal, Route, Key string
	// RequestHash identifies the request (method, path, query and body):
	// the same key with another request is refused.
	RequestHash string
	// Owner is this server process: a pending key of another owner was left
	// by a server that stopped mid-request.
	Owner string
}

// IdempotencyField is the field a refused Idempotency-Key is reported as.
const IdempotencyField = "Idempotency-Key"

// BeginIdempotent records req as running, if its key is new (or expired):
// begun is true and the caller runs the request, then calls
// CompleteIdempotent or AbandonIdempotent. Otherwise it returns the key as
// stored: done (replay its answer), or pending in another (stopped) server.
// The same key with another request is a *errdefs.FieldError naming
// Idempotency-Key; one still running in this server is errdefs.ErrConflict.
func (s *Store) BeginIdempotent(ctx context.Context, req IdemRequest) (k IdemKey, begun bool, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		id, err := newID()
		if err != nil {
			return IdemKey{}, false, err
		}
		now := s.now()
		k = IdemKey{ID: id, TenantID: req.TenantID, Principal: req.Principal, Key: req.Key, Route: req.Route,
			RequestHash: req.RequestHash, State: IdemPending, Owner: req.Owner, CreatedAt: now, ExpiresAt: now.Add(IdempotencyTTL)}
		err = s.db.WithContext(ctx).Create(&k).Error
		if err == nil {
			return k, true, nil
		}
		if !s.duplicate(err) {
			return IdemKey{}, false, fmt.Errorf("record idempotency key: %w", err)
		}
		var cur IdemKey
		err = s.db.WithContext(ctx).Take(&cur, "tenant_id = ? AND principal = ? AND route = ? AND idem_key = ?",
			req.TenantID, req.Principal, req.Route, req.Key).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			continue // abandoned meanwhile: try again
		}
		if err != nil {
			return IdemKey{}, false, fmt.Errorf("read idempotency key: %w", err)
		}
		if !cur.ExpiresAt.After(now) {
			// Past its 24 h: forgotten; the key starts afresh.
			if err := s.db.WithContext(ctx).Where("id = ? AND expires_at <= ?", cur.ID, now).Delete(&IdemKey{}).Error; err != nil {
				return IdemKey{}, false, fmt.Errorf("forget expired idempotency key: %w", err)
			}
			continue
		}
		switch {
		case cur.RequestHash != req.RequestHash:
			return IdemKey{}, false, errdefs.Invalid(IdempotencyField, "reused",
				fmt.Sprintf("this key was already used for a different request to %s (method, path or body differ); use a new key for a new request", req.Route))
		case cur.State == IdemPending && cur.Owner == req.Owner:
			return IdemKey{}, false, fmt.Errorf("%w: a request with this Idempotency-Key is still in progress; retry once it has answered", errdefs.ErrConflict)
		}
		return cur, false, nil
	}
	return IdemKey{}, false, fmt.Errorf("%w: the Idempotency-Key changed hands while it was read; retry", errdefs.ErrConflict)
}

// TakeOverIdempotent makes this server (owner) the runner of a pending key
// a stopped server left; false when someone else took it first (or the
// key is not of k's tenant).
func (s *Store) TakeOverIdempotent(ctx context.Context, k IdemKey, owner string) (bool, error) {
	res := s.db.WithContext(ctx).Model(&IdemKey{}).Where("id = ? AND tenant_id = ? AND state = ? AND owner = ?", k.ID, k.TenantID, IdemPending, k.Owner).
		Update("owner", owner)
	if res.Error != nil {
		return false, fmt.Errorf("take over idempotency key: %w", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// CompleteIdempotent stores the answer of the request a key begun; replays
// get it until the key expires. A body holding a secret must come sealed.
func (s *Store) CompleteIdempotent(ctx context.Context, id string, status int, location, body string, sealed bool) error {
	now := s.now()
	err := s.db.WithContext(ctx).Model(&IdemKey{}).Where("id = ?", id).Updates(map[string]any{
		"state": IdemDone, "status_code": status, "location": location, "response_body": body, "sealed": sealed, "completed_at": now,
	}).Error
	if err != nil {
		return fmt.Errorf("store answer of idempotency key: %w", err)
	}
	return nil
}

// AbandonIdempotent forgets a key whose request failed: it made nothing
// that a retry should be answered with, so a retry runs again.
func (s *Store) AbandonIdempotent(ctx context.Context, id string) error {
	if err := s.db.WithContext(ctx).Where("id = ? AND state = ?", id, IdemPending).Delete(&IdemKey{}).Error; err != nil {
		return fmt.Errorf("forget idempotency key: %w", err)
	}
	return nil
}

// DeleteExpiredIdempotencyKeys removes the keys past their 24 h.
func (s *Store) DeleteExpiredIdempotencyKeys(ctx context.Context) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at < ?", s.now()).Delete(&IdemKey{})
	if res.Error != nil {
		return 0, fmt.Errorf("delete expired idempotency keys: %w", res.Error)
	}
	return res.RowsAffected, nil
}
