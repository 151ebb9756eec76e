package secrets

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"github.com/stockade-dev/stockade/tenants/dbtime"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Limits.
const (
	DefaultTTL     = 30 * 24 * time.Hour
	MinTTL         = time.Minute
	MaxTTL         = 366 * 24 * time.Hour
	MaxValueBytes  = 16 << 10
	MaxHosts       = 32
	MaxPerTenant   = 200
	maxHostPattern = 253
)

// namePattern: secrets become environment variables in the sandbox, so a
// name is one.
var namePattern = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,63}$`)

// labelPattern is one DNS label.
var labelPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// States of a secret.
const (
	StateActive  = "active"
	StateExpired = "expired"
	StateRevoked = "revoked"
)

// Secret is what may be known about a secret: never its value.
type Secret struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Hosts     []string   `json:"hosts"`
	Inject    []string   `json:"inject"`
	CreatedBy string     `json:"created_by"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	State     string     `json:"state"`
}

// NewSecret describes a secret to create. TTL 0 means DefaultTTL; Inject
// nil means DefaultInject (see NormalizeInject).
type NewSecret struct {
	Name   string
	Value  string
	Hosts  []string
	Inject []string
	TTL    time.Duration
}

// Check validates every field of ns and returns it normalised (name
// trimmed, hosts lowercased without duplicates, inject normalised, the
// default TTL for none); an error lists every field at fault
// (*errdefs.FieldError joined), not just the first, so a form shows them
// all at once.
func (ns NewSecret) Check() (NewSecret, error) {
	var errs []error
	ns.Name = strings.TrimSpace(ns.Name)
	if ns.Name == "" {
		errs = append(errs, errdefs.Required("name"))
	} else if err := CheckName(ns.Name); err != nil {
		errs = append(errs, err)
	}
	switch {
	case ns.Value == "":
		errs = append(errs, errdefs.Required("value"))
	case len(ns.Value) > MaxValueBytes:
		errs = append(errs, errdefs.Invalid("value", "value_length", fmt.Sprintf("must be 1-%d bytes", MaxValueBytes)))
	case !utf8.ValidString(ns.Value) || strings.ContainsAny(ns.Value, "\x00\r\n"):
		// It is spliced into HTTP headers: a newline would let it add headers.
		errs = append(errs, errdefs.Invalid("value", "value_chars", "must be text on one line"))
	}
	var hosts []string
	switch {
	case len(ns.Hosts) == 0:
		errs = append(errs, errdefs.Required("hosts"))
	case len(ns.Hosts) > MaxHosts:
		errs = append(errs, errdefs.Invalid("hosts", "hosts_count", fmt.Sprintf("give 1-%d hosts the secret may be sent to", MaxHosts)))
	default:
		for _, h := range ns.Hosts {
			p, err := NormalizeHost(h)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if !slices.Contains(hosts, p) {
				hosts = append(hosts, p)
			}
		}
	}
	ns.Hosts = hosts
	inject, err := NormalizeInject(ns.Inject)
	if err != nil {
		errs = append(errs, err)
	}
	ns.Inject = inject
	if ns.TTL == 0 {
		ns.TTL = DefaultTTL
	}
	if ns.TTL < MinTTL || ns.TTL > MaxTTL {
		errs = append(errs, errdefs.Invalid("ttl", "ttl_range", "must be between 1m and 8784h (366 days)"))
	}
	return ns, errors.Join(errs...)
}

// row is the database form of a secret.
type row struct {
	ID         string `gorm:"primaryKey"`
	TenantID   string
	Name       string
	Hosts      []string `gorm:"serializer:json"`
	Inject     []string `gorm:"serializer:json"`
	Ciphertext string
	CreatedBy  string
	CreatedAt  time.Time
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	RevokedBy  string
}

func (row) TableName() string { return "secrets" }

func (r *row) AfterFind(*gorm.DB) error {
	r.CreatedAt = r.CreatedAt.UTC()
	if r.ExpiresAt != nil {
		t := r.ExpiresAt.UTC()
		r.ExpiresAt = &t
	}
	if r.RevokedAt != nil {
		t := r.RevokedAt.UTC()
		r.RevokedAt = &t
	}
	return nil
}

// live reports whether the secret may be used at now.
func (r *row) live(now time.Time) bool {
	return r.RevokedAt == nil && (r.ExpiresAt == nil || now.Before(*r.ExpiresAt))
}

func (r *row) public(now time.Time) Secret {
	s := Secret{ID: r.ID, Name: r.Name, Hosts: slices.Clone(r.Hosts), Inject: slices.Clone(r.inject()), CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, State: StateActive}
	switch {
	case r.RevokedAt != nil:
		s.State = StateRevoked
	case !r.live(now):
		s.State = StateExpired
	}
	return s
}

// secretAD binds a ciphertext to its tenant and secret.
func secretAD(tenantID, id string) string { return "secret/" + tenantID + "/" + id }

// Config tunes a Store.
type Config struct {
	// Clock is the store's time; nil means the real clock.
	Clock clockwork.Clock
	// LeafTTL is how long an issued leaf certificate is valid; 0 means 7 days.
	LeafTTL time.Duration
}

// Store keeps the secrets and certificate authorities of every tenant. Every
// method takes the tenant and scopes by it: another tenant's secret is
// errdefs.ErrNotFound.
type Store struct {
	db       *gorm.DB
	seal     *sealer
	phKey    []byte
	clock    clockwork.Clock
	leafTTL  time.Duration
	mu       sync.Mutex
	cas      map[string]*authority  // tenant -> parsed CA
	leaves   map[string]*cachedLeaf // tenant + "\x00" + host -> leaf
	creating sync.Mutex             // serializes CA creation in this process
}

// New returns a Store on db (migrated) whose keys derive from root, the
// installation's root key (STOCKADE_SECRET_KEY, at least 32 bytes).
func New(db *gorm.DB, root []byte, cfg Config) (*Store, error) {
	s, err := newSealer(root)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	ph, err := deriveKey(root, "placeholders/v1")
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.LeafTTL <= 0 {
		cfg.LeafTTL = 7 * 24 * time.Hour
	}
	return &Store{db: db, seal: s, phKey: ph, clock: cfg.Clock, leafTTL: cfg.LeafTTL,
		cas: map[string]*authority{}, leaves: map[string]*cachedLeaf{}}, nil
}

// now is the store's time as the database keeps it.
func (s *Store) now() time.Time { return dbtime.Of(s.clock.Now()) }

func (s *Store) write(tx *gorm.DB, e audit.Event) error {
	e.Time = s.now()
	return audit.Write(tx, e)
}

// CheckName validates a secret name.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return errdefs.Invalid("name", "secret_name", "must be 1-64 characters A-Z, 0-9 or '_', not starting with a digit (it becomes an environment variable)")
	}
	return nil
}

// NormalizeHost validates one host pattern ("api.github.com" or
// "*.example.com") and returns it lowercase without a trailing dot.
func NormalizeHost(h string) (string, error) {
	p := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
	bad := errdefs.Invalid("hosts", "host_pattern", fmt.Sprintf("%q must be a domain name like api.github.com or a wildcard like *.example.com", h))
	if p == "" || len(p) > maxHostPattern {
		return "", bad
	}
	rest, wild := strings.CutPrefix(p, "*.")
	labels := strings.Split(rest, ".")
	// A wildcard needs at least a registrable-looking suffix: "*.com" would
	// send the secret to every .com host.
	if len(labels) < 2 && (wild || rest != "localhost") {
		return "", bad
	}
	for _, l := range labels {
		if !labelPattern.MatchString(l) {
			return "", bad
		}
	}
	return p, nil
}

// MatchHost reports whether host (a name, no port) is covered by pattern:
// exact, or "*.example.com" for any name below example.com (not
// example.com itself).
func MatchHost(pattern, host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix) && len(host) > len(suffix)+1
	}
	return host == pattern
}

// Create stores a new secret. Its value is encrypted here and never
// returned by any method of the store; the audit event names it and its
// hosts only. A live secret of the same name is errdefs.ErrConflict.
func (s *Store) Create(ctx context.Context, actor audit.Actor, tenantID string, ns NewSecret) (Secret, error) {
	ns, err := ns.Check()
	if err != nil {
		return Secret{}, err
	}
	name, hosts, inject, ttl := ns.Name, ns.Hosts, ns.Inject, ns.TTL
	id, err := uuid.NewV7()
	if err != nil {
		return Secret{}, fmt.Errorf("create secret %s: %w", name, err)
	}
	now := s.now()
	exp := now.Add(ttl)
	r := row{ID: id.String(), TenantID: tenantID, Name: name, Hosts: hosts, Inject: inject, CreatedBy: actor.Name, CreatedAt: now, ExpiresAt: &exp}
	if r.CreatedBy == "" {
		r.CreatedBy = actor.ID
	}
	if r.Ciphertext, err = s.seal.seal([]byte(ns.Value), secretAD(tenantID, r.ID)); err != nil {
		return Secret{}, fmt.Errorf("create secret %s: %w", name, err)
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Take(&tenants.Tenant{}, "id = ?", tenantID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		var live []row
		if err := tx.Select("id, name, expires_at, revoked_at").Where("tenant_id = ? AND revoked_at IS NULL", tenantID).Find(&live).Error; err != nil {
			return err
		}
		if len(live) >= MaxPerTenant {
			return fmt.Errorf("at most %d secrets per tenant: %w", MaxPerTenant, errdefs.ErrQuota)
		}
		for i := range live {
			if live[i].Name != name {
				continue
			}
			if live[i].live(now) {
				return fmt.Errorf("a secret named %s exists: revoke it first: %w", name, errdefs.ErrConflict)
			}
			// An expired secret keeps its name until revoked: retire it now,
			// so the unique index lets the new one in.
			if err := tx.Model(&row{}).Where("id = ? AND tenant_id = ?", live[i].ID, tenantID).
				Updates(map[string]any{"revoked_at": now, "revoked_by": "expired, replaced"}).Error; err != nil {
				return err
			}
		}
		if err := tx.Create(&r).Error; err != nil {
			if errors.Is(err, gorm.ErrDuplicatedKey) {
				return fmt.Errorf("a secret named %s exists: %w", name, errdefs.ErrConflict)
			}
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeSecretCreated, "secret", r.ID, map[string]any{
			"secret_name": name, "hosts": hosts, "inject": inject, "expires_at": exp,
		}))
	})
	if err != nil {
		return Secret{}, fmt.Errorf("create secret %s in tenant %s: %w", name, tenantID, err)
	}
	return r.public(now), nil
}

// List returns the tenant's secrets (names, hosts, state; no values),
// live ones first by name, then revoked ones newest first.
func (s *Store) List(ctx context.Context, tenantID string) ([]Secret, error) {
	var rows []row
	if err := s.db.WithContext(ctx).Omit("ciphertext").Where("tenant_id = ?", tenantID).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list secrets of tenant %s: %w", tenantID, err)
	}
	now := s.now()
	out := make([]Secret, 0, len(rows))
	for i := range rows {
		out = append(out, rows[i].public(now))
	}
	slices.SortFunc(out, func(a, b Secret) int {
		ar, br := a.RevokedAt != nil, b.RevokedAt != nil
		switch {
		case ar != br:
			if ar {
				return 1
			}
			return -1
		case ar:
			return b.RevokedAt.Compare(*a.RevokedAt)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// Get returns the tenant's unrevoked secret called name (possibly expired).
func (s *Store) Get(ctx context.Context, tenantID, name string) (Secret, error) {
	var r row
	err := s.db.WithContext(ctx).Omit("ciphertext").Take(&r, "tenant_id = ? AND name = ? AND revoked_at IS NULL", tenantID, name).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Secret{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("secret %s: %w", name, err)
	}
	return r.public(s.now()), nil
}

// Revoke revokes the tenant's unrevoked secret called name, at once: the
// gateway stops swapping it on the next connection. No such secret is
// errdefs.ErrNotFound.
func (s *Store) Revoke(ctx context.Context, actor audit.Actor, tenantID, name string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var r row
		if err := tx.Omit("ciphertext").Take(&r, "tenant_id = ? AND name = ? AND revoked_at IS NULL", tenantID, name).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		by := actor.Name
		if by == "" {
			by = actor.ID
		}
		res := tx.Model(&row{}).Where("id = ? AND tenant_id = ? AND revoked_at IS NULL", r.ID, tenantID).
			Updates(map[string]any{"revoked_at": s.now(), "revoked_by": by})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errdefs.ErrNotFound
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeSecretRevoked, "secret", r.ID, map[string]any{"secret_name": name}))
	})
	if err != nil {
		return fmt.Errorf("revoke secret %s in tenant %s: %w", name, tenantID, err)
	}
	return nil
}

// liveRows returns the tenant's usable secrets, with their ciphertexts.
func (s *Store) liveRows(ctx context.Context, tenantID string) ([]row, error) {
	var rows []row
	now := s.now()
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)", tenantID, now).
		Order("name").Find(&rows).Error; err != nil {
		return nil, err
	}
	return rows, nil
}
