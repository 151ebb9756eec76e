package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Version is one saved policy of a tenant. Version 0 is the built-in
// Defaults of a tenant that never saved one: it has no author.
type Version struct {
	TenantID string
	Version  int
	Doc      Doc
	// AuthorID, AuthorName and AuthorKind say who saved it (audit actor).
	AuthorID   string
	AuthorName string
	AuthorKind string
	Reason     string
	// RolledBackFrom is the version whose document a rollback copied; nil
	// for an edit.
	RolledBackFrom *int
	CreatedAt      time.Time
	// Changes are the settings this version changed against the one it
	// replaced, as Save, Commit and Rollback found them in the
	// transaction that stored it; nil in what Current, Get and List read.
	Changes []Change
}

// row is a Version as stored.
type row struct {
	TenantID       string    `gorm:"column:tenant_id;primaryKey"`
	Version        int       `gorm:"column:version;primaryKey;autoIncrement:false"`
	Doc            string    `gorm:"column:doc"`
	AuthorID       string    `gorm:"column:author_id"`
	AuthorName     string    `gorm:"column:author_name"`
	AuthorKind     string    `gorm:"column:author_kind"`
	Reason         string    `gorm:"column:reason"`
	RolledBackFrom *int      `gorm:"column:rolled_back_from"`
	CreatedAt      time.Time `gorm:"column:created_at;autoCreateTime:false"`
}

func (row) TableName() string { return "policies" }

func (r row) version() (Version, error) {
	var d Doc
	if err := json.Unmarshal([]byte(r.Doc), &d); err != nil {
		return Version{}, fmt.Errorf("read policy %d of tenant %s: %w", r.Version, r.TenantID, err)
	}
	d.normalize()
	return Version{TenantID: r.TenantID, Version: r.Version, Doc: d, AuthorID: r.AuthorID, AuthorName: r.AuthorName,
		AuthorKind: r.AuthorKind, Reason: r.Reason, RolledBackFrom: r.RolledBackFrom, CreatedAt: r.CreatedAt.UTC()}, nil
}

// Store keeps the policy versions of every tenant. Every method takes the
// tenant: another tenant's version is not found.
type Store struct {
	db    *gorm.DB
	clock dbtime.Clock
	v     *Validator
}

// NewStore returns a Store on db (opened and migrated). A nil clock means
// time.Now.
func NewStore(db *gorm.DB, clock func() time.Time) (*Store, error) {
	v, err := NewValidator()
	if err != nil {
		return nil, err
	}
	return &Store{db: db, clock: clock, v: v}, nil
}

// Validator is the store's schema validator.
func (s *Store) Validator() *Validator { return s.v }

// defaults is version 0 of tenantID.
func defaults(tenantID string) Version {
	return Version{TenantID: tenantID, Version: 0, Doc: Defaults(), AuthorKind: audit.ActorSystem, AuthorName: "Stockade",
		Reason: "defaults for a new tenant"}
}

// Current returns the tenant's newest version, or version 0 (Defaults)
// when it never saved one.
func (s *Store) Current(ctx context.Context, tenantID string) (Version, error) {
	return current(s.db.WithContext(ctx), tenantID)
}

func current(tx *gorm.DB, tenantID string) (Version, error) {
	var rows []row
	if err := tx.Where("tenant_id = ?", tenantID).Order("version DESC").Limit(1).Find(&rows).Error; err != nil {
		return Version{}, fmt.Errorf("read policy of tenant %s: %w", tenantID, err)
	}
	if len(rows) == 0 {
		return defaults(tenantID), nil
	}
	return rows[0].version()
}

// Get returns one version of the tenant's policy; 0 is Defaults.
func (s *Store) Get(ctx context.Context, tenantID string, version int) (Version, error) {
	if version == 0 {
		return defaults(tenantID), nil
	}
	var r row
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND version = ?", tenantID, version).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Version{}, fmt.Errorf("policy version %d: %w", version, errdefs.ErrNotFound)
	}
	if err != nil {
		return Version{}, fmt.Errorf("read policy version %d of tenant %s: %w", version, tenantID, err)
	}
	return r.version()
}

// List returns every version of the tenant's policy, newest first, ending
// with version 0 (Defaults).
func (s *Store) List(ctx context.Context, tenantID string) ([]Version, error) {
	var rows []row
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("version DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list policy versions of tenant %s: %w", tenantID, err)
	}
	out := make([]Version, 0, len(rows)+1)
	for _, r := range rows {
		v, err := r.version()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return append(out, defaults(tenantID)), nil
}

// Edit is a change of policy.
type Edit struct {
	// Raw is the document as JSON: the schema judges it once, naming every
	// failing path. When Raw is nil, Doc is checked instead.
	Raw json.RawMessage
	// Doc is a document built in Go; used when Raw is nil.
	Doc    Doc
	Reason string
	// Base, when set, is the version the edit was made on: if another
	// version was saved since, the edit is refused (errdefs.ErrConflict)
	// rather than silently undoing it.
	Base *int
}

const maxReason = 500

// check validates the edit's document once: Raw as JSON, else Doc.
func (s *Store) check(e Edit) (Doc, error) {
	if e.Raw != nil {
		return s.v.Parse(e.Raw)
	}
	return s.v.Check(e.Doc)
}

// conflict refuses an edit made on base when cur is in force since.
func conflict(cur Version, base *int) error {
	if base == nil || *base == cur.Version {
		return nil
	}
	return fmt.Errorf("%w: the policy was changed to version %d (by %s) since version %d was loaded; reload and edit again",
		errdefs.ErrConflict, cur.Version, cur.Author(), *base)
}

// Proposal is an edit checked against the schema and the tenant's
// current version: what saving it would change. Only Propose makes one;
// Commit saves it without checking the document again.
type Proposal struct {
	// Current is the version in force when the edit was checked.
	Current Version
	// Doc is the checked document.
	Doc Doc
	// Changes are the settings Doc changes against Current, sorted by
	// path; empty (not nil) when it changes nothing.
	Changes []Change

	tenantID, reason string
	base             *int
}

// Notes says, one sentence each, what saving the proposal changes for the
// running sandboxes and for new ones.
func (p Proposal) Notes(running []Running) []string { return Preview(p.Current.Doc, p.Doc, running) }

// Propose checks e's document against the schema (Errors naming every
// failing path) and against the tenant's current version (a stale Base is
// errdefs.ErrConflict), and says what saving it would change. Nothing is
// saved, and the reason is not checked yet: a preview needs none.
func (s *Store) Propose(ctx context.Context, tenantID string, e Edit) (Proposal, error) {
	doc, err := s.check(e)
	if err != nil {
		return Proposal{}, err
	}
	cur, err := s.Current(ctx, tenantID)
	if err != nil {
		return Proposal{}, err
	}
	if err := conflict(cur, e.Base); err != nil {
		return Proposal{}, err
	}
	changes := Diff(cur.Doc, doc)
	if changes == nil {
		changes = []Change{}
	}
	return Proposal{Current: cur, Doc: doc, Changes: changes, tenantID: tenantID, reason: e.Reason, base: e.Base}, nil
}

// Commit stores a proposal of the tenant as its next version, audited in
// the same transaction, exactly as Save would. The version's Changes are
// those against the version it replaced, found in that transaction (a
// version saved since the proposal with no Base is diffed against too).
func (s *Store) Commit(ctx context.Context, actor audit.Actor, tenantID string, p Proposal) (Version, error) {
	if p.tenantID == "" {
		return Version{}, errors.New("commit policy: the proposal was not made by Propose")
	}
	if p.tenantID != tenantID {
		return Version{}, fmt.Errorf("commit policy: %w: the proposal is another tenant's", errdefs.ErrNotFound)
	}
	return s.append(ctx, actor, tenantID, p.Doc, p.reason, p.base, nil)
}

// Save checks e's document against the schema once (Errors naming every
// failing path; nothing is saved) and stores it as the tenant's next
// version, audited in the same transaction. The version's Changes say what
// it changed.
func (s *Store) Save(ctx context.Context, actor audit.Actor, tenantID string, e Edit) (Version, error) {
	doc, err := s.check(e)
	if err != nil {
		return Version{}, err
	}
	return s.append(ctx, actor, tenantID, doc, e.Reason, e.Base, nil)
}

// Rollback stores the document of version to as the tenant's next
// version. Like a save, it needs a reason (kept with the version and in
// the audit event): without one nothing is stored.
func (s *Store) Rollback(ctx context.Context, actor audit.Actor, tenantID string, to int, reason string) (Version, error) {
	return s.RollbackOn(ctx, actor, tenantID, to, reason, nil)
}

// RollbackOn is Rollback made on version base (when not nil): if another
// version was saved since, it is refused (errdefs.ErrConflict), so the
// diff a person confirmed is the one applied.
func (s *Store) RollbackOn(ctx context.Context, actor audit.Actor, tenantID string, to int, reason string, base *int) (Version, error) {
	old, err := s.Get(ctx, tenantID, to)
	if err != nil {
		return Version{}, err
	}
	return s.append(ctx, actor, tenantID, old.Doc, reason, base, &to)
}

func (s *Store) append(ctx context.Context, actor audit.Actor, tenantID string, doc Doc, reason string, base, from *int) (Version, error) {
	reason = strings.TrimSpace(reason)
	switch {
	case reason == "":
		return Version{}, errdefs.Invalid("reason", "required", "say why the policy changes: it is kept with the version")
	case utf8.RuneCountInString(reason) > maxReason || !utf8.ValidString(reason) || strings.ContainsRune(reason, 0):
		return Version{}, errdefs.Invalid("reason", "size", fmt.Sprintf("at most %d characters of text", maxReason))
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return Version{}, fmt.Errorf("encode policy: %w", err)
	}
	var (
		out     Version
		attempt int // the version number this save tried to take
	)
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		cur, err := current(tx, tenantID)
		if err != nil {
			return err
		}
		if err := conflict(cur, base); err != nil {
			return err
		}
		changes := Diff(cur.Doc, doc)
		// An edit that changes nothing is refused; a rollback to what is
		// in force is still recorded: someone asked for it, with a reason.
		if len(changes) == 0 && from == nil {
			return errdefs.Invalid("/", "unchanged", fmt.Sprintf("the policy is the same as version %d: nothing to save", cur.Version))
		}
		r := row{TenantID: tenantID, Version: cur.Version + 1, Doc: string(raw), AuthorID: actor.ID, AuthorName: actor.Name,
			AuthorKind: actor.Kind, Reason: reason, RolledBackFrom: from, CreatedAt: s.clock.Now()}
		attempt = r.Version
		if err := tx.Create(&r).Error; err != nil {
			return fmt.Errorf("store policy version %d: %w", r.Version, err)
		}
		paths := make([]string, 0, len(changes))
		for _, c := range changes {
			paths = append(paths, c.Path)
		}
		typ, details := audit.TypePolicyUpdated, map[string]any{"version": r.Version, "previous": cur.Version, "reason": reason, "changed": paths}
		if from != nil {
			typ = audit.TypePolicyRolledBack
			details["rolled_back_from"] = *from
		}
		e := actor.Event(tenantID, typ, "policy", fmt.Sprint(r.Version), details)
		e.Time = r.CreatedAt
		if err := audit.Write(tx, e); err != nil {
			return err
		}
		if out, err = r.version(); err != nil {
			return err
		}
		out.Changes = changes
		return nil
	})
	if err != nil {
		var fe *errdefs.FieldError
		if errors.Is(err, errdefs.ErrConflict) || errors.As(err, &fe) {
			return Version{}, err
		}
		// Two saves raced for the same version number: the loser is told.
		if attempt > 0 {
			if _, gerr := s.Get(ctx, tenantID, attempt); gerr == nil {
				return Version{}, fmt.Errorf("save policy of tenant %s: %w: another change took version %d at the same time; reload and retry",
					tenantID, errdefs.ErrConflict, attempt)
			}
		}
		return Version{}, fmt.Errorf("save policy of tenant %s: %w", tenantID, err)
	}
	return out, nil
}

// Author names who saved v, for people.
func (v Version) Author() string {
	if v.AuthorName != "" {
		return v.AuthorName
	}
	return v.AuthorID
}
