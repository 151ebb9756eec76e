package vmpool

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// HostState is what an operator made of a host. Placement takes only
// active hosts; "down" is the host's health (it does not answer), not a
// state anyone sets.
type HostState string

// Host states.
const (
	HostActive   HostState = "active"
	HostCordoned HostState = "cordoned" // no new VMs; what runs stays
	HostDraining HostState = "draining" // no new VMs, warm VMs moved away, sandboxes left to end
	HostRemoved  HostState = "removed"  // no longer used; the row stays for its VMs' history
)

// Labels are a host's key=value labels, or the labels a tenant's hosts must
// carry. Stored as "k=v,k=v", sorted by key.
type Labels map[string]string

var (
	labelKeyRe   = regexp.MustCompile(`^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$`)
	labelValueRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
)

// maxLabels bounds the labels of one host or constraint.
const maxLabels = 16

// ParseLabels parses "k=v,k=v" (spaces or commas between); field names the
// form or JSON field in the error.
func ParseLabels(field, s string) (Labels, error) {
	out := Labels{}
	for _, kv := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, errdefs.Invalid(field, "label_format", fmt.Sprintf("%q is not key=value", truncate(kv, 80)))
		}
		if err := checkLabel(field, k, v); err != nil {
			return nil, err
		}
		if _, dup := out[k]; dup {
			return nil, errdefs.Invalid(field, "label_repeated", fmt.Sprintf("label %q is given twice", k))
		}
		out[k] = v
	}
	if len(out) > maxLabels {
		return nil, errdefs.Invalid(field, "labels_too_many", fmt.Sprintf("at most %d labels", maxLabels))
	}
	return out, nil
}

func checkLabel(field, k, v string) error {
	if !labelKeyRe.MatchString(k) {
		return errdefs.Invalid(field, "label_key", fmt.Sprintf("label key %q: 1-63 lowercase letters, digits, '.', '_', '-' or '/'", truncate(k, 80)))
	}
	if !labelValueRe.MatchString(v) {
		return errdefs.Invalid(field, "label_value", fmt.Sprintf("label %s: value %q: 1-63 letters, digits, '.', '_' or '-'", k, truncate(v, 80)))
	}
	return nil
}

// Check validates labels built in code (the API's map).
func (l Labels) Check(field string) error {
	if len(l) > maxLabels {
		return errdefs.Invalid(field, "labels_too_many", fmt.Sprintf("at most %d labels", maxLabels))
	}
	for _, k := range l.keys() {
		if err := checkLabel(field, k, l[k]); err != nil {
			return err
		}
	}
	return nil
}

func (l Labels) keys() []string {
	ks := make([]string, 0, len(l))
	for k := range l {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// String is "k=v,k=v", sorted by key.
func (l Labels) String() string {
	parts := make([]string, 0, len(l))
	for _, k := range l.keys() {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// Has reports whether l carries every label of want.
func (l Labels) Has(want Labels) bool {
	for k, v := range want {
		if l[k] != v {
			return false
		}
	}
	return true
}

// Value stores Labels as text.
func (l Labels) Value() (driver.Value, error) { return l.String(), nil }

// Scan reads Labels stored by Value.
func (l *Labels) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case nil:
	default:
		return fmt.Errorf("labels: cannot scan %T", v)
	}
	out, err := ParseLabels("labels", s)
	if err != nil {
		return err
	}
	*l = out
	return nil
}

// HostConstraint is the labels every host of a tenant's VMs must carry.
type HostConstraint struct {
	TenantID  string    `gorm:"column:tenant_id;primaryKey"`
	Labels    Labels    `gorm:"column:labels"`
	UpdatedAt time.Time `gorm:"column:updated_at;autoUpdateTime:false"`
	UpdatedBy string    `gorm:"column:updated_by"`
}

// TableName is the GORM table of HostConstraint.
func (HostConstraint) TableName() string { return "tenant_host_constraints" }

// host reads one host row.
func (s *Store) host(ctx context.Context, uri string) (Host, error) {
	var h Host
	if err := s.db.WithContext(ctx).Take(&h, "uri = ?", uri).Error; err != nil {
		return Host{}, fmt.Errorf("host %s: %w", uri, notFound(err))
	}
	return h, nil
}

// AddHost records a host an operator added (after its connection check),
// audited host.added. A host already there (and not removed) is
// ErrConflict; a removed one comes back active with the new labels.
func (s *Store) AddHost(ctx context.Context, actor audit.Actor, h Host) (Host, error) {
	now := s.clock.Now()
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var old Host
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Take(&old, "uri = ?", h.URI).Error
		switch {
		case err == nil && old.State != HostRemoved:
			return fmt.Errorf("%w: host %s is already there (%s)", errdefs.ErrConflict, h.URI, old.State)
		case err == nil:
			if err := tx.Model(&Host{}).Where("uri = ?", h.URI).Updates(map[string]any{
				"state": HostActive, "state_reason": "", "labels": h.Labels, "added_by": actor.ID, "down_at": nil,
				"cpus": h.CPUs, "memory_kib": h.MemoryKiB, "free_memory_kib": h.FreeMemoryKiB, "domain_type": h.DomainType,
				"health": HealthOK, "health_reason": "", "last_seen_at": now, "updated_at": now}).Error; err != nil {
				return err
			}
		case errors.Is(err, gorm.ErrRecordNotFound):
			h.State, h.AddedBy, h.Health, h.FirstSeenAt, h.UpdatedAt, h.LastSeenAt = HostActive, actor.ID, HealthOK, now, now, &now
			if err := tx.Create(&h).Error; err != nil {
				return err
			}
		default:
			return err
		}
		return s.write(tx, actor.Event("", audit.TypeHostAdded, "host", h.URI, map[string]any{"labels": h.Labels.String()}))
	})
	if err != nil {
		return Host{}, fmt.Errorf("add host %s: %w", h.URI, err)
	}
	return s.host(ctx, h.URI)
}

// hostChange is one operator change of a host's state.
type hostChange struct {
	to     HostState
	from   []HostState
	event  string
	reason string
	// check runs in the transaction with the host rows locked: a refusal
	// (draining the last active host) leaves everything as it was.
	check func(tx *gorm.DB, h Host) error
}

// setHostState moves a host between operator states, audited.
func (s *Store) setHostState(ctx context.Context, actor audit.Actor, uri string, c hostChange) (Host, error) {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var all []Host
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Order("uri").Find(&all).Error; err != nil {
			return err
		}
		i := slices.IndexFunc(all, func(h Host) bool { return h.URI == uri })
		if i < 0 || all[i].State == HostRemoved {
			return fmt.Errorf("host %s: %w", uri, errdefs.ErrNotFound)
		}
		h := all[i]
		if h.State == c.to {
			return fmt.Errorf("%w: host %s is already %s", errdefs.ErrConflict, uri, h.State)
		}
		if !slices.Contains(c.from, h.State) {
			return fmt.Errorf("%w: host %s is %s", errdefs.ErrConflict, uri, h.State)
		}
		if c.check != nil {
			if err := c.check(tx, h); err != nil {
				return err
			}
		}
		if err := tx.Model(&Host{}).Where("uri = ?", uri).Updates(map[string]any{
			"state": c.to, "state_reason": truncate(c.reason, 500), "updated_at": s.clock.Now()}).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event("", c.event, "host", uri, map[string]any{"from": string(h.State), "reason": c.reason}))
	})
	if err != nil {
		return Host{}, fmt.Errorf("%s host %s: %w", strings.TrimPrefix(c.event, "host."), uri, err)
	}
	return s.host(ctx, uri)
}

// CordonHost stops placing new VMs on the host; what runs there stays.
// Cordoning the last active host that answers is refused unless forced.
// Audited host.cordoned.
func (s *Store) CordonHost(ctx context.Context, actor audit.Actor, uri, reason string, force bool) (Host, error) {
	return s.setHostState(ctx, actor, uri, hostChange{to: HostCordoned, from: []HostState{HostActive, HostDraining},
		event: audit.TypeHostCordoned, reason: reason, check: func(tx *gorm.DB, h Host) error { return activeHostsLeft(tx, h, force) }})
}

// UncordonHost makes a cordoned or draining host active again. Audited
// host.uncordoned.
func (s *Store) UncordonHost(ctx context.Context, actor audit.Actor, uri string) (Host, error) {
	return s.setHostState(ctx, actor, uri, hostChange{to: HostActive, from: []HostState{HostCordoned, HostDraining},
		event: audit.TypeHostUncordoned})
}

// DrainHost takes the host out of placement and has its warm VMs moved
// away: they are destroyed (by the service watching the host) and the warm
// pools refill them elsewhere; VMs running sandboxes stay until those end.
// The host shows "drained" when empty. Draining the last active host that
// answers is refused unless forced. Audited host.drained.
func (s *Store) DrainHost(ctx context.Context, actor audit.Actor, uri, reason string, force bool) (Host, error) {
	return s.setHostState(ctx, actor, uri, hostChange{to: HostDraining, from: []HostState{HostActive, HostCordoned},
		event: audit.TypeHostDrained, reason: reason, check: func(tx *gorm.DB, h Host) error { return activeHostsLeft(tx, h, force) }})
}

// RemoveHost forgets a host with no active VM of ours (drain it first): it
// is no longer connected to, and stays removed across restarts even when
// STOCKADE_LIBVIRT_URIS names it (AddHost brings it back). Audited
// host.removed.
func (s *Store) RemoveHost(ctx context.Context, actor audit.Actor, uri string) (Host, error) {
	return s.setHostState(ctx, actor, uri, hostChange{to: HostRemoved,
		from: []HostState{HostActive, HostCordoned, HostDraining}, event: audit.TypeHostRemoved, check: noActiveVMs})
}

// activeHostsLeft refuses taking the last active host out of placement.
func activeHostsLeft(tx *gorm.DB, h Host, force bool) error {
	if force {
		return nil
	}
	var n int64
	if err := tx.Model(&Host{}).Where("state = ? AND down_at IS NULL AND uri <> ?", HostActive, h.URI).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %s is the last active host that answers: no VM could start anywhere; add a host first, or force it", errdefs.ErrConflict, h.URI)
	}
	return nil
}

// noActiveVMs refuses removing a host that still runs VMs of ours.
func noActiveVMs(tx *gorm.DB, h Host) error {
	var n int64
	if err := tx.Model(&VM{}).Where("host_uri = ? AND state IN ?", h.URI, activeStates()).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: host %s still runs %d vm(s): drain it first and wait for them to end", errdefs.ErrConflict, h.URI, n)
	}
	return nil
}

// setHostDown records that a host stopped answering (down=true) or answers
// again, audited host.down / host.up. changed is false when it already was.
func (s *Store) setHostDown(ctx context.Context, uri string, down bool, reason string) (changed bool, err error) {
	now := s.clock.Now()
	err = s.tx(ctx, func(tx *gorm.DB) error {
		q := tx.Model(&Host{}).Where("uri = ?", uri)
		ev := audit.TypeHostUp
		if down {
			q = q.Where("down_at IS NULL")
			ev = audit.TypeHostDown
		} else {
			q = q.Where("down_at IS NOT NULL")
		}
		upd := map[string]any{"down_at": nil, "updated_at": now}
		if down {
			upd = map[string]any{"down_at": now, "health": HealthUnavailable, "health_reason": truncate(reason, 500), "updated_at": now}
		}
		res := q.Updates(upd)
		if res.Error != nil {
			return res.Error
		}
		if changed = res.RowsAffected > 0; !changed {
			return nil
		}
		return s.write(tx, SystemActor().Event("", ev, "host", uri, map[string]any{"reason": reason}))
	})
	if err != nil {
		return false, fmt.Errorf("record host %s down=%v: %w", uri, down, err)
	}
	return changed, nil
}

// HostConstraint returns the tenant's host constraint (empty labels: none).
func (s *Store) HostConstraint(ctx context.Context, tenantID string) (HostConstraint, error) {
	var c HostConstraint
	err := s.db.WithContext(ctx).Take(&c, "tenant_id = ?", tenantID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return HostConstraint{TenantID: tenantID, Labels: Labels{}}, nil
	}
	if err != nil {
		return HostConstraint{}, fmt.Errorf("host constraint of tenant %s: %w", tenantID, err)
	}
	return c, nil
}

// SetHostConstraint sets the labels the tenant's hosts must carry (empty:
// any host), audited host.constraint_set in the tenant's log.
func (s *Store) SetHostConstraint(ctx context.Context, actor audit.Actor, tenantID string, labels Labels) (HostConstraint, error) {
	if err := labels.Check("labels"); err != nil {
		return HostConstraint{}, err
	}
	c := HostConstraint{TenantID: tenantID, Labels: labels, UpdatedAt: s.clock.Now(), UpdatedBy: actor.ID}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var n int64
		if err := tx.Table("tenants").Where("id = ?", tenantID).Count(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("tenant %s: %w", tenantID, errdefs.ErrNotFound)
		}
		if len(labels) == 0 {
			if err := tx.Delete(&HostConstraint{}, "tenant_id = ?", tenantID).Error; err != nil {
				return err
			}
		} else if err := tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "tenant_id"}},
			DoUpdates: clause.AssignmentColumns([]string{"labels", "updated_at", "updated_by"})}).Create(&c).Error; err != nil {
			return err
		}
		return s.write(tx, actor.Event(tenantID, audit.TypeHostConstraintSet, "tenant", tenantID, map[string]any{"labels": labels.String()}))
	})
	if err != nil {
		return HostConstraint{}, fmt.Errorf("set host constraint of tenant %s: %w", tenantID, err)
	}
	return c, nil
}

// placeTx picks the host of a new VM of memMiB for the tenant, inside
// CreateVM's transaction: the candidate host rows are locked (SELECT ... FOR
// UPDATE on PostgreSQL; SQLite has a single writer), so two replicas placing
// at once see each other's VMs and cannot over-commit a host. live are the
// hosts this process reaches now. The pick: active hosts only, carrying the
// tenant's constraint labels, with the VM's memory free (host memory minus
// what our active VMs commit); of those, the one with the fewest of the
// tenant's VMs (spread), then the most free memory.
func placeTx(tx *gorm.DB, tenantID string, memMiB int, live []string) (string, error) {
	var c HostConstraint
	if err := tx.Take(&c, "tenant_id = ?", tenantID).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return "", err
	}
	var hosts []Host
	if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("state <> ?", HostRemoved).Order("uri").Find(&hosts).Error; err != nil {
		return "", err
	}
	if len(c.Labels) > 0 && !slices.ContainsFunc(hosts, func(h Host) bool { return h.Labels.Has(c.Labels) }) {
		return "", fmt.Errorf("%w: the tenant's vms need a host labelled %s and no host has these labels", errdefs.ErrConflict, c.Labels)
	}
	type load struct {
		HostURI   string `gorm:"column:host_uri"`
		MemoryMiB int64  `gorm:"column:memory_mib"`
		Mine      int64  `gorm:"column:mine"`
	}
	var loads []load
	if err := tx.Model(&VM{}).Select("host_uri, SUM(memory_mib) AS memory_mib, SUM(CASE WHEN tenant_id = ? THEN 1 ELSE 0 END) AS mine", tenantID).
		Where("state IN ?", activeStates()).Group("host_uri").Scan(&loads).Error; err != nil {
		return "", err
	}
	byHost := map[string]load{}
	for _, l := range loads {
		byHost[l.HostURI] = l
	}
	var (
		best             string
		bestMine, bestFr int64
		why              []string
	)
	for _, h := range hosts {
		switch {
		case !slices.Contains(live, h.URI):
			why = append(why, fmt.Sprintf("%s does not answer", h.URI))
			continue
		case h.State != HostActive:
			why = append(why, fmt.Sprintf("%s is %s", h.URI, h.State))
			continue
		case !h.Labels.Has(c.Labels):
			continue // not one of the tenant's
		}
		l := byHost[h.URI]
		free := int64(h.MemoryKiB/1024) - l.MemoryMiB
		if free < int64(memMiB) {
			why = append(why, fmt.Sprintf("%s has %d MiB uncommitted, %d MiB needed", h.URI, max(free, 0), memMiB))
			continue
		}
		if best == "" || l.Mine < bestMine || (l.Mine == bestMine && free > bestFr) {
			best, bestMine, bestFr = h.URI, l.Mine, free
		}
	}
	if best == "" {
		if len(why) == 0 {
			why = append(why, "no host is configured")
		}
		return "", fmt.Errorf("%w: no host can take the vm: %s", ErrUnavailable, strings.Join(why, "; "))
	}
	return best, nil
}
