// Package replicas is what several `stockade serve` processes on one
// PostgreSQL database know about each other: a registry of the live
// replicas (id, the internal URL the others reach it at, a heartbeat), the
// installation-wide internal key their requests to each other are signed
// with, and the per-VM channel leases: exactly one replica owns each VM's
// agent channel, with a heartbeat and an epoch (fencing).
//
// A replica registers at Start and renews every Heartbeat; a replica whose
// row is past its expiry is dead. It renews the leases of the VMs it owns in
// the same beat, in one statement; a lease nobody renewed for VMLeaseTTL is
// free for another replica to adopt (Adopt bumps its epoch), and the old
// owner, if it comes back, finds a newer epoch and lets go (OnLost) without
// touching the VM.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Replica is one registered `stockade serve` process.
type Replica struct {
	ID          string    `gorm:"column:id;primaryKey"`
	InternalURL string    `gorm:"column:internal_url"`
	Hostname    string    `gorm:"column:hostname"`
	PID         int       `gorm:"column:pid"`
	StartedAt   time.Time `gorm:"column:started_at"`
	HeartbeatAt time.Time `gorm:"column:heartbeat_at"`
	ExpiresAt   time.Time `gorm:"column:expires_at"`
}

// TableName is the registry's table.
func (Replica) TableName() string { return "replicas" }

// Lease is the row saying which replica owns one VM's agent channel.
type Lease struct {
	VMID        string    `gorm:"column:vm_id;primaryKey"`
	Owner       string    `gorm:"column:owner"`
	Epoch       int64     `gorm:"column:epoch"`
	HeartbeatAt time.Time `gorm:"column:heartbeat_at"`
	ExpiresAt   time.Time `gorm:"column:expires_at"`
}

// TableName is the VM leases' table.
func (Lease) TableName() string { return "vm_leases" }

// Config configures a Registry. Zero values take the defaults noted.
type Config struct {
	// ID is this replica's id; default a new UUIDv7 (a restarted process
	// is a new replica).
	ID string
	// InternalURL is where the other replicas reach this one
	// (STOCKADE_INTERNAL_URL); required.
	InternalURL string
	// Key is the installation-wide secret the replicas sign their internal
	// requests with, derived from the installation's root key; at least 32
	// bytes. It is never logged.
	Key []byte
	// TTL is how long a registration lasts without a heartbeat; default 10 s.
	TTL time.Duration
	// Heartbeat is how often the registration and the VM leases are
	// renewed; default 3 s.
	Heartbeat time.Duration
	// VMLeaseTTL is how long a VM lease lasts without a heartbeat, so how
	// soon another replica adopts a dead one's VMs; default 10 s, at most 15 s.
	VMLeaseTTL time.Duration
	// Hostname and PID say who the replica is; default this machine and process.
	Hostname string
	PID      int
	Clock    clockwork.Clock
	Logger   *slog.Logger
}

func (c *Config) checkAndSetDefaults() error {
	if c.InternalURL == "" {
		return fmt.Errorf("replicas: %w", &errdefs.FieldError{Field: "internal_url", Rule: "required", Detail: "the URL other replicas reach this one at is required (STOCKADE_INTERNAL_URL)"})
	}
	if len(c.Key) < 32 {
		return errors.New("replicas: the internal key must be at least 32 bytes")
	}
	if c.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("replicas: %w", err)
		}
		c.ID = id.String()
	}
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.TTL {
		c.Heartbeat = 3 * time.Second
		if c.Heartbeat >= c.TTL {
			c.Heartbeat = c.TTL / 3
		}
	}
	if c.VMLeaseTTL <= 0 {
		c.VMLeaseTTL = 10 * time.Second
	}
	if c.VMLeaseTTL > 15*time.Second {
		c.VMLeaseTTL = 15 * time.Second
	}
	if c.Heartbeat >= c.VMLeaseTTL {
		c.Heartbeat = c.VMLeaseTTL / 3
	}
	if c.Hostname == "" {
		c.Hostname, _ = os.Hostname()
	}
	if c.PID == 0 {
		c.PID = os.Getpid()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Registry is this process's membership of the installation's replicas,
// and the VM leases it holds.
type Registry struct {
	db  *gorm.DB
	cfg Config

	mu      sync.Mutex
	self    Replica
	held    map[string]int64 // vm id -> epoch of the lease this replica holds
	started bool

	stop chan struct{}
	done chan struct{}
	once sync.Once

	onLost func(vmID string)
	stats  stats
	manual bool // tests: no background heartbeat, beat is called by hand
}

// New returns the registry of this replica; Start registers it.
func New(db *gorm.DB, cfg Config) (*Registry, error) {
	if db == nil {
		return nil, errors.New("replicas: no database")
	}
	if err := cfg.checkAndSetDefaults(); err != nil {
		return nil, err
	}
	return &Registry{db: db, cfg: cfg, held: map[string]int64{},
		self: Replica{ID: cfg.ID, InternalURL: cfg.InternalURL, Hostname: cfg.Hostname, PID: cfg.PID},
		stop: make(chan struct{}), done: make(chan struct{})}, nil
}

func (r *Registry) now() time.Time { return r.cfg.Clock.Now().UTC().Truncate(time.Microsecond) }

// Start registers this replica and renews its registration and VM leases
// every Heartbeat until Close.
func (r *Registry) Start(ctx context.Context) error {
	now := r.now()
	r.mu.Lock()
	r.self.StartedAt, r.self.HeartbeatAt, r.self.ExpiresAt = now, now, now.Add(r.cfg.TTL)
	row := r.self
	r.mu.Unlock()
	if err := r.db.WithContext(ctx).Create(&row).Error; err != nil {
		return fmt.Errorf("register replica %s: %w", row.ID, err)
	}
	// Dead replicas' rows go after a while (their leases expired long ago).
	if err := r.db.WithContext(ctx).Where("expires_at < ?", now.Add(-time.Hour)).Delete(&Replica{}).Error; err != nil {
		r.cfg.Logger.Warn("forget dead replicas", "err", err)
	}
	r.mu.Lock()
	r.started = true
	r.mu.Unlock()
	r.cfg.Logger.Info("replica registered", "replica", row.ID, "internal_url", row.InternalURL)
	if r.manual {
		close(r.done)
		return nil
	}
	go r.loop()
	return nil
}

// Close stops the heartbeat, frees this replica's VM leases at once (so
// another replica adopts its VMs without waiting for them to expire) and
// removes its registration. The VMs keep running.
func (r *Registry) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		r.mu.Lock()
		started := r.started
		r.mu.Unlock()
		if !started {
			return
		}
		<-r.done
		old := time.Unix(0, 0).UTC()
		if e := r.db.WithContext(ctx).Model(&Lease{}).Where("owner = ?", r.cfg.ID).
			Updates(map[string]any{"expires_at": old}).Error; e != nil {
			err = fmt.Errorf("release vm leases: %w", e)
		}
		if e := r.db.WithContext(ctx).Where("id = ?", r.cfg.ID).Delete(&Replica{}).Error; e != nil && err == nil {
			err = fmt.Errorf("unregister replica: %w", e)
		}
		r.mu.Lock()
		r.held = map[string]int64{}
		r.mu.Unlock()
	})
	return err
}

// OnLost sets who is told of each VM lease this replica held that another
// replica took over (or that could not be renewed before it expired): that
// VM's channel must be closed and the VM touched no more (the VM pool).
func (r *Registry) OnLost(fn func(vmID string)) {
	r.mu.Lock()
	r.onLost = fn
	r.mu.Unlock()
}

// Abandon stops the heartbeat and leaves everything as it is, as a
// replica that died would: its registration and VM leases expire by
// themselves and other replicas adopt its VMs. Close is the clean way out.
func (r *Registry) Abandon() {
	r.once.Do(func() {
		close(r.stop)
		r.mu.Lock()
		started := r.started
		r.held = map[string]int64{}
		r.mu.Unlock()
		if started {
			<-r.done
		}
	})
}

// ID is this replica's id.
func (r *Registry) ID() string { return r.cfg.ID }

// Self is this process's replica.
func (r *Registry) Self() Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.self
}

// Key is the installation-wide secret the replicas derive their internal
// request signatures from. Never log it.
func (r *Registry) Key() []byte { return append([]byte(nil), r.cfg.Key...) }

// VMLeaseTTL is how long a VM lease lasts without a heartbeat.
func (r *Registry) VMLeaseTTL() time.Duration { return r.cfg.VMLeaseTTL }

// Replicas lists the live replicas (registration not expired), by id.
func (r *Registry) Replicas(ctx context.Context) ([]Replica, error) {
	var out []Replica
	if err := r.db.WithContext(ctx).Where("expires_at > ?", r.now()).Order("id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	return out, nil
}

// OwnerOf returns the replica that owns vmID's agent channel now (its lease
// valid and the replica alive), or errdefs.ErrUnavailable when none does
// (no lease, or it expired: adoption pending).
func (r *Registry) OwnerOf(ctx context.Context, vmID string) (Replica, error) {
	now := r.now()
	var l Lease
	err := r.db.WithContext(ctx).Take(&l, "vm_id = ?", vmID).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Replica{}, fmt.Errorf("owner of vm %s: %w: no replica owns its channel", vmID, errdefs.ErrUnavailable)
	}
	if err != nil {
		return Replica{}, fmt.Errorf("owner of vm %s: %w", vmID, err)
	}
	if !l.ExpiresAt.After(now) {
		return Replica{}, fmt.Errorf("owner of vm %s: %w: its lease expired (adoption pending)", vmID, errdefs.ErrUnavailable)
	}
	if l.Owner == r.cfg.ID {
		return r.Self(), nil
	}
	var rep Replica
	err = r.db.WithContext(ctx).Take(&rep, "id = ? AND expires_at > ?", l.Owner, now).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Replica{}, fmt.Errorf("owner of vm %s: %w: its owner %s is not registered", vmID, errdefs.ErrUnavailable, l.Owner)
	}
	if err != nil {
		return Replica{}, fmt.Errorf("owner of vm %s: %w", vmID, err)
	}
	return rep, nil
}

// Owns reports whether this replica holds vmID's lease (as far as its last
// heartbeat knows).
func (r *Registry) Owns(vmID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.held[vmID]
	return ok
}

// Epoch is the epoch of vmID's lease this replica holds, 0 if none.
func (r *Registry) Epoch(vmID string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[vmID]
}

// Held lists the VMs whose leases this replica holds, sorted.
func (r *Registry) Held() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.held))
	for id := range r.held {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ClaimNew records, in tx (the transaction that records the VM), that this
// replica owns the new VM vmID's channel: the replica that boots a VM owns
// it. Call Claimed once tx has committed.
func (r *Registry) ClaimNew(tx *gorm.DB, vmID string) error {
	now := r.now()
	l := Lease{VMID: vmID, Owner: r.cfg.ID, Epoch: 1, HeartbeatAt: now, ExpiresAt: now.Add(r.cfg.VMLeaseTTL)}
	if err := tx.Create(&l).Error; err != nil {
		return fmt.Errorf("claim vm %s: %w", vmID, err)
	}
	return nil
}

// Claimed notes a lease ClaimNew wrote, after its transaction committed.
func (r *Registry) Claimed(vmID string) {
	r.mu.Lock()
	r.held[vmID] = 1
	r.mu.Unlock()
}

// Adopt takes vmID's lease when nobody holds it, or its holder let it
// expire, bumping its epoch; it returns true when this replica owns it now
// (including when it already did). A lease another live replica renews is
// never taken.
func (r *Registry) Adopt(ctx context.Context, vmID string) (bool, error) {
	now := r.now()
	exp := now.Add(r.cfg.VMLeaseTTL)
	db := r.db.WithContext(ctx)
	// Absent: a VM recorded before leases existed, or whose lease was released.
	ins := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&Lease{VMID: vmID, Owner: r.cfg.ID, Epoch: 1, HeartbeatAt: now, ExpiresAt: exp})
	if ins.Error != nil {
		return false, fmt.Errorf("adopt vm %s: %w", vmID, ins.Error)
	}
	from := ""
	if ins.RowsAffected == 0 {
		var prev Lease
		if err := db.Take(&prev, "vm_id = ?", vmID).Error; err != nil {
			return false, fmt.Errorf("adopt vm %s: %w", vmID, err)
		}
		if prev.Owner != r.cfg.ID {
			from = prev.Owner
		}
		res := db.Model(&Lease{}).Where("vm_id = ? AND (expires_at < ? OR owner = ?)", vmID, now, r.cfg.ID).
			Updates(map[string]any{"epoch": gorm.Expr("epoch + CASE WHEN owner = ? THEN 0 ELSE 1 END", r.cfg.ID),
				"owner": r.cfg.ID, "heartbeat_at": now, "expires_at": exp})
		if res.Error != nil {
			return false, fmt.Errorf("adopt vm %s: %w", vmID, res.Error)
		}
		if res.RowsAffected == 0 {
			return false, nil
		}
	}
	var l Lease
	if err := db.Take(&l, "vm_id = ?", vmID).Error; err != nil {
		return false, fmt.Errorf("adopt vm %s: %w", vmID, err)
	}
	if l.Owner != r.cfg.ID {
		return false, nil
	}
	r.mu.Lock()
	prev, had := r.held[vmID]
	r.held[vmID] = l.Epoch
	r.mu.Unlock()
	if !had || prev != l.Epoch {
		r.stats.adopted.Add(1)
		if from != "" {
			r.stats.failovers.Add(1)
			r.cfg.Logger.Info("vm lease adopted from an expired owner", "vm", vmID, "from", from, "epoch", l.Epoch)
		}
	}
	return true, nil
}

// Release ends this replica's lease of vmID (the VM ended): the row goes,
// if the lease is still this replica's at the epoch it holds.
func (r *Registry) Release(ctx context.Context, vmID string) error {
	r.mu.Lock()
	epoch, ok := r.held[vmID]
	delete(r.held, vmID)
	r.mu.Unlock()
	if !ok {
		return nil
	}
	if err := r.db.WithContext(ctx).Where("vm_id = ? AND owner = ? AND epoch = ?", vmID, r.cfg.ID, epoch).Delete(&Lease{}).Error; err != nil {
		return fmt.Errorf("release vm %s: %w", vmID, err)
	}
	return nil
}

// Leases lists every VM lease, for health and metrics.
func (r *Registry) Leases(ctx context.Context) ([]Lease, error) {
	var out []Lease
	if err := r.db.WithContext(ctx).Order("vm_id").Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list vm leases: %w", err)
	}
	return out, nil
}

func (r *Registry) loop() {
	defer close(r.done)
	t := r.cfg.Clock.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	lastOK := r.now()
	for {
		select {
		case <-r.stop:
			return
		case <-t.Chan():
		}
		lastOK = r.tick(lastOK)
	}
}

// tick is one heartbeat: it renews the registration and the VM leases and
// returns when the last successful renewal began (lastOK, or now). Fencing
// by time: the leases that renewal wrote hold until lastOK+VMLeaseTTL, and
// this replica lets go of its VMs' channels a heartbeat BEFORE that, never
// at or after the expiry another replica adopts them at; a renewal may not
// run into the last half heartbeat. So two replicas never hold one VM's
// channel at once (given clocks that agree within half a heartbeat).
func (r *Registry) tick(lastOK time.Time) time.Time {
	start := r.now()
	fence := tenants.LeaseFence{TTL: r.cfg.VMLeaseTTL, Heartbeat: r.cfg.Heartbeat}
	left := fence.RenewBudget(lastOK, start)
	if left <= 0 {
		r.loseAll("not renewed for " + start.Sub(lastOK).String())
		left = r.cfg.Heartbeat // still register again and renew: the VMs are adopted anew
	}
	ctx, cancel := clockwork.WithTimeout(context.Background(), r.cfg.Clock, left)
	err := r.beatAt(ctx, start)
	cancel()
	if err == nil {
		return start
	}
	r.cfg.Logger.Warn("replica heartbeat", "err", err)
	if since := r.cfg.Clock.Since(lastOK); fence.GiveUp(lastOK, r.cfg.Clock.Now()) {
		// The next heartbeat would come after the leases expired: another
		// replica may own them by then.
		r.loseAll("not renewed for " + since.Round(time.Millisecond).String() + " of a " + r.cfg.VMLeaseTTL.String() + " lease")
	}
	return lastOK
}

// beat renews the registration and every VM lease this replica holds, then
// lets go of the leases another replica took.
func (r *Registry) beat(ctx context.Context) error { return r.beatAt(ctx, r.now()) }

// beatAt is beat with the leases' new expiry counted from now.
func (r *Registry) beatAt(ctx context.Context, now time.Time) error {
	db := r.db.WithContext(ctx)
	res := db.Model(&Replica{}).Where("id = ?", r.cfg.ID).Updates(map[string]any{"heartbeat_at": now, "expires_at": now.Add(r.cfg.TTL)})
	if res.Error != nil {
		return fmt.Errorf("renew replica: %w", res.Error)
	}
	if res.RowsAffected == 0 { // removed by someone: register again
		r.mu.Lock()
		row := r.self
		r.mu.Unlock()
		row.HeartbeatAt, row.ExpiresAt = now, now.Add(r.cfg.TTL)
		if err := db.Create(&row).Error; err != nil {
			return fmt.Errorf("register replica again: %w", err)
		}
	}
	r.mu.Lock()
	r.self.HeartbeatAt, r.self.ExpiresAt = now, now.Add(r.cfg.TTL)
	r.mu.Unlock()
	if err := db.Model(&Lease{}).Where("owner = ?", r.cfg.ID).
		Updates(map[string]any{"heartbeat_at": now, "expires_at": now.Add(r.cfg.VMLeaseTTL)}).Error; err != nil {
		return fmt.Errorf("renew vm leases: %w", err)
	}
	var mine []Lease
	if err := db.Where("owner = ?", r.cfg.ID).Find(&mine).Error; err != nil {
		return fmt.Errorf("list vm leases: %w", err)
	}
	have := make(map[string]int64, len(mine))
	for _, l := range mine {
		have[l.VMID] = l.Epoch
	}
	var lost []string
	r.mu.Lock()
	for id, epoch := range r.held {
		if e, ok := have[id]; !ok || e != epoch {
			lost = append(lost, id)
			delete(r.held, id)
		}
	}
	r.mu.Unlock()
	for _, id := range lost {
		r.lost(id, "taken over by another replica")
	}
	return nil
}

func (r *Registry) loseAll(why string) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.held))
	for id := range r.held {
		ids = append(ids, id)
	}
	r.held = map[string]int64{}
	r.mu.Unlock()
	for _, id := range ids {
		r.lost(id, why)
	}
}

func (r *Registry) lost(vmID, why string) {
	r.stats.lost.Add(1)
	r.cfg.Logger.Warn("vm lease lost: letting go of its channel", "vm", vmID, "why", why)
	r.mu.Lock()
	fn := r.onLost
	r.mu.Unlock()
	if fn != nil {
		fn(vmID)
	}
}
