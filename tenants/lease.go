package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"
)

// ErrLeaseHeld: another server holds the installation lease.
var ErrLeaseHeld = errors.New("installation lease held by another server")

// LeaseHolder says who holds the installation lease.
type LeaseHolder struct {
	Holder      string    `gorm:"column:holder"`
	Hostname    string    `gorm:"column:hostname"`
	PID         int       `gorm:"column:pid"`
	StartedAt   time.Time `gorm:"column:started_at"`
	HeartbeatAt time.Time `gorm:"column:heartbeat_at"`
	ExpiresAt   time.Time `gorm:"column:expires_at"`
	Epoch       int64     `gorm:"column:epoch"`
}

// LeaseHeldError is the refusal of a lease someone else holds; it wraps
// ErrLeaseHeld and names the holder.
type LeaseHeldError struct{ By LeaseHolder }

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%s: %s pid %d, serving since %s (last heartbeat %s, expires %s unless renewed)",
		ErrLeaseHeld, e.By.Hostname, e.By.PID, e.By.StartedAt.UTC().Format(time.RFC3339),
		e.By.HeartbeatAt.UTC().Format(time.RFC3339), e.By.ExpiresAt.UTC().Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// LeaseConfig configures an installation lease. Zero values take the
// defaults noted.
type LeaseConfig struct {
	// TTL is how long the lease lasts without a heartbeat: a crashed
	// holder's lease is free that long after its last one; default 20 s.
	TTL time.Duration
	// Heartbeat is how often the holder renews it; default TTL/4.
	Heartbeat time.Duration
	// Hostname and PID name the holder for whoever is refused; default
	// this machine and process.
	Hostname string
	PID      int
	// Holder is the holder id written (a replica's id when the lease is
	// the replicas' leader lease); default a new UUIDv7.
	Holder string
	// Clock drives the heartbeat, the wait for a held lease and the
	// expiry times written; default the real one.
	Clock  clockwork.Clock
	Logger *slog.Logger
}

func (c *LeaseConfig) checkAndSetDefaults() {
	if c.TTL <= 0 {
		c.TTL = 20 * time.Second
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.TTL {
		c.Heartbeat = c.TTL / 4
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
}

// Lease is the installation lease this process holds: one server per
// installation (one data directory, one database) at a time, so no two
// servers ever reconcile, adopt or destroy the same VMs. It is renewed in
// the background until Release; Lost is closed if it could not be.
type Lease struct {
	db      *gorm.DB
	cfg     LeaseConfig
	holder  string
	epoch   int64
	takenAt time.Time // the take's time: the first expiry is takenAt+TTL

	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error
	stop     chan struct{}
	done     chan struct{}
	release  sync.Once
}

// leaseRow is the one row of installation_lease.
type leaseRow struct {
	Singleton int `gorm:"column:singleton;primaryKey"`
	LeaseHolder
}

func (leaseRow) TableName() string { return "installation_lease" }

// AcquireLease takes the installation lease, if it is free (never taken,
// released, or expired), and keeps it until Release. A lease another server
// holds is a *LeaseHeldError naming it.
func AcquireLease(ctx context.Context, db *gorm.DB, cfg LeaseConfig) (*Lease, error) {
	cfg.checkAndSetDefaults()
	holder := cfg.Holder
	if holder == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("acquire installation lease: %w", err)
		}
		holder = id.String()
	}
	l := &Lease{db: db, cfg: cfg, holder: holder, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.take(ctx); err != nil {
		return nil, err
	}
	go l.renewLoop()
	return l, nil
}

// WaitLease is AcquireLease that waits, polling every poll, while another
// server holds the lease; onHeld is told who, once per holder.
func WaitLease(ctx context.Context, db *gorm.DB, cfg LeaseConfig, poll time.Duration, onHeld func(LeaseHolder)) (*Lease, error) {
	cfg.checkAndSetDefaults()
	var last string
	for {
		l, err := AcquireLease(ctx, db, cfg)
		var he *LeaseHeldError
		if !errors.As(err, &he) {
			return l, err
		}
		if he.By.Holder != last && onHeld != nil {
			onHeld(he.By)
		}
		last = he.By.Holder
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the installation lease: %w (%w)", ctx.Err(), err)
		case <-cfg.Clock.After(poll):
		}
	}
}

func (l *Lease) now() time.Time { return l.cfg.Clock.Now().UTC().Truncate(time.Microsecond) }

// take claims the row when it is free, in one conditional update, so of two
// servers starting at once exactly one wins.
func (l *Lease) take(ctx context.Context) error {
	now := l.now()
	res := l.db.WithContext(ctx).Model(&leaseRow{}).Where("singleton = 1 AND expires_at < ?", now).Updates(map[string]any{
		"holder": l.holder, "hostname": l.cfg.Hostname, "pid": l.cfg.PID, "started_at": now, "heartbeat_at": now,
		"expires_at": now.Add(l.cfg.TTL), "epoch": gorm.Expr("epoch + 1"),
	})
	if res.Error != nil {
		return fmt.Errorf("acquire installation lease: %w", res.Error)
	}
	var row leaseRow
	if err := l.db.WithContext(ctx).Take(&row, "singleton = 1").Error; err != nil {
		return fmt.Errorf("acquire installation lease: %w", err)
	}
	if res.RowsAffected == 0 || row.Holder != l.holder {
		return &LeaseHeldError{By: row.LeaseHolder}
	}
	l.epoch, l.takenAt = row.Epoch, now
	return nil
}

// Holder is this lease's holder id.
func (l *Lease) Holder() string { return l.holder }

// Epoch counts the times the lease changed hands; it grows with each take.
func (l *Lease) Epoch() int64 { return l.epoch }

// Lost is closed when the lease could not be renewed before it expired, or
// another server took it: this process must stop touching VMs.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why the lease was lost (nil while it is held).
func (l *Lease) Err() error {
	select {
	case <-l.lost:
		return l.lostErr
	default:
		return nil
	}
}

func (l *Lease) markLost(err error) {
	l.lostOnce.Do(func() {
		l.lostErr = err
		close(l.lost)
	})
}

func (l *Lease) renewLoop() {
	defer close(l.done)
	t := l.cfg.Clock.NewTicker(l.cfg.Heartbeat)
	defer t.Stop()
	// lastOK is when the last successful renewal began: the lease holds
	// until lastOK+TTL, since that renewal wrote that expiry.
	lastOK := l.takenAt
	for {
		select {
		case <-l.stop:
			return
		case <-t.Chan():
		}
		// Fencing by time: this holder gives the lease up (its loops stop)
		// a heartbeat BEFORE the expiry another server waits for, never
		// at it, and a renewal may not run into the last half heartbeat,
		// so two holders never act at once (given clocks that agree
		// within half a heartbeat).
		start := l.now()
		fence := LeaseFence{TTL: l.cfg.TTL, Heartbeat: l.cfg.Heartbeat}
		left := fence.RenewBudget(lastOK, start)
		if left <= 0 {
			l.markLost(fmt.Errorf("installation lease lost: not renewed for %s", start.Sub(lastOK)))
			return
		}
		ctx, cancel := clockwork.WithTimeout(context.Background(), l.cfg.Clock, left)
		ok, err := l.renewAt(ctx, start)
		cancel()
		switch {
		case err == nil && ok:
			lastOK = start
		case err == nil:
			l.markLost(fmt.Errorf("installation lease lost: another server took it"))
			return
		default:
			l.cfg.Logger.Warn("renew installation lease", "err", err)
			if fence.GiveUp(lastOK, l.cfg.Clock.Now()) {
				l.markLost(fmt.Errorf("installation lease lost: not renewed for %s, expiring in %s: %w",
					l.cfg.Clock.Since(lastOK).Round(time.Millisecond), (l.cfg.TTL - l.cfg.Clock.Since(lastOK)).Round(time.Millisecond), err))
				return
			}
		}
	}
}

// renew extends the lease if this process still holds it.
func (l *Lease) renew(ctx context.Context) (bool, error) { return l.renewAt(ctx, l.now()) }

// renewAt extends the lease to now+TTL if this process still holds it.
func (l *Lease) renewAt(ctx context.Context, now time.Time) (bool, error) {
	res := l.db.WithContext(ctx).Model(&leaseRow{}).Where("singleton = 1 AND holder = ? AND epoch = ?", l.holder, l.epoch).
		Updates(map[string]any{"heartbeat_at": now, "expires_at": now.Add(l.cfg.TTL)})
	if res.Error != nil {
		return false, fmt.Errorf("renew installation lease: %w", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Renew renews the lease now (the background loop does it every
// Heartbeat); false means another server holds it.
func (l *Lease) Renew(ctx context.Context) (bool, error) { return l.renew(ctx) }

// Release stops the heartbeat and frees the lease at once, so the next
// server starts without waiting for it to expire.
func (l *Lease) Release(ctx context.Context) error {
	var err error
	l.release.Do(func() {
		close(l.stop)
		<-l.done
		res := l.db.WithContext(ctx).Model(&leaseRow{}).Where("singleton = 1 AND holder = ? AND epoch = ?", l.holder, l.epoch).
			Update("expires_at", time.Unix(0, 0).UTC())
		if res.Error != nil {
			err = fmt.Errorf("release installation lease: %w", res.Error)
		}
	})
	return err
}

// CurrentLease returns who holds (or last held) the installation lease.
func CurrentLease(ctx context.Context, db *gorm.DB) (LeaseHolder, error) {
	var row leaseRow
	if err := db.WithContext(ctx).Take(&row, "singleton = 1").Error; err != nil {
		return LeaseHolder{}, fmt.Errorf("installation lease: %w", err)
	}
	return row.LeaseHolder, nil
}

// LeaseFence is how a lease's holder fences itself by time: the lease it
// last renewed at lastOK holds until lastOK+TTL, and the holder stops
// acting a heartbeat before that, never at or after the expiry another
// holder waits for, so two holders never act at once (given clocks that
// agree within half a heartbeat). The installation lease and the VM
// channel leases (sandbox/replicas) both follow it.
type LeaseFence struct{ TTL, Heartbeat time.Duration }

// RenewBudget is how long a renewal begun at now may run: at most a
// heartbeat, and never into the last half heartbeat of the lease; <= 0
// means give the lease up now.
func (f LeaseFence) RenewBudget(lastOK, now time.Time) time.Duration {
	return min(f.Heartbeat, lastOK.Add(f.TTL).Sub(now)-f.Heartbeat/2)
}

// GiveUp reports, after a renewal failed at now, that the next heartbeat
// would come after the lease expired: give it up now.
func (f LeaseFence) GiveUp(lastOK, now time.Time) bool {
	return now.Sub(lastOK)+f.Heartbeat >= f.TTL
}
