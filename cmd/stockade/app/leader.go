package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
)

// Leader is the leader lease of several replicas on one PostgreSQL
// database: the installation lease (migrations 00020), held by one replica
// at a time, which alone runs the singleton loops (warm pools, reapers,
// compliance scheduling, webhook dispatch, sweeps, retention). The others
// wait for it; when the leader dies its lease expires and one of them takes
// it with a newer epoch. A leader that cannot renew stops its loops at once
// (their context ends) and waits again.
type Leader struct {
	db    *gorm.DB
	cfg   tenants.LeaseConfig
	log   *slog.Logger
	clock clockwork.Clock

	leading atomic.Bool
	epoch   atomic.Int64
	changes atomic.Int64 // times this replica became leader

	mu    sync.Mutex
	loops []leaderLoop
	lctx  context.Context // the current term's context; nil while not leading
	wg    sync.WaitGroup
}

type leaderLoop struct {
	name string
	fn   func(ctx context.Context)
}

func newLeader(db *gorm.DB, holder string, clock clockwork.Clock, log *slog.Logger) *Leader {
	return &Leader{db: db, log: log, clock: clock,
		cfg: tenants.LeaseConfig{Holder: holder, TTL: 10 * time.Second, Clock: clock, Logger: log}}
}

// Leading reports whether this replica holds the leader lease now.
func (l *Leader) Leading() bool { return l != nil && l.leading.Load() }

// Epoch is the leader lease's epoch of this replica's current (or last) term.
func (l *Leader) Epoch() int64 { return l.epoch.Load() }

// Terms counts the times this replica became leader.
func (l *Leader) Terms() int64 { return l.changes.Load() }

// Go runs fn, a singleton loop, whenever this replica leads, under a
// context that ends when the term does.
func (l *Leader) Go(name string, fn func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loops = append(l.loops, leaderLoop{name, fn})
	if l.lctx != nil {
		l.start(l.lctx, leaderLoop{name, fn})
	}
}

func (l *Leader) start(ctx context.Context, lp leaderLoop) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		lp.fn(ctx)
	}()
}

// Run campaigns for the leader lease until ctx ends: waits for it, leads
// until it is lost, and waits again. On return the lease is released.
func (l *Leader) Run(ctx context.Context) {
	for ctx.Err() == nil {
		lease, err := tenants.WaitLease(ctx, l.db, l.cfg, time.Second, func(h tenants.LeaseHolder) {
			l.log.Info("another replica leads", "leader", h.Holder, "leader_host", h.Hostname, "leader_pid", h.PID)
		})
		if err != nil {
			if ctx.Err() == nil {
				l.log.Warn("leader lease", "err", err)
				select {
				case <-ctx.Done():
				case <-l.clock.After(time.Second):
				}
			}
			continue
		}
		l.lead(ctx, lease)
	}
}

// lead is one term: the singleton loops run until the lease is lost or ctx
// ends, then stop before the lease is released.
func (l *Leader) lead(ctx context.Context, lease *tenants.Lease) {
	tctx, cancel := context.WithCancel(ctx)
	l.epoch.Store(lease.Epoch())
	l.changes.Add(1)
	l.leading.Store(true)
	l.log.Info("leader lease taken: running the singleton loops", "epoch", lease.Epoch())
	l.mu.Lock()
	l.lctx = tctx
	for _, lp := range l.loops {
		l.start(tctx, lp)
	}
	l.mu.Unlock()
	select {
	case <-lease.Lost():
		l.log.Error("leader lease lost: stopping the singleton loops", "err", lease.Err())
	case <-ctx.Done():
	}
	l.leading.Store(false)
	l.mu.Lock()
	l.lctx = nil
	l.mu.Unlock()
	cancel()
	l.wg.Wait()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	if err := lease.Release(rctx); err != nil && !errors.Is(err, context.Canceled) {
		l.log.Warn("release leader lease", "err", err)
	}
}
