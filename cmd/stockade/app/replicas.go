package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/replicas"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/forward"
)

// Replicas: on PostgreSQL any number of `stockade serve` processes share
// one installation. Each registers itself (sandbox/replicas), owns the
// channels of the VMs it boots or adopts, and campaigns for the leader
// lease that runs the singleton loops. On SQLite there is one server per
// data directory (serve's installation lease) and none of this runs.
type replication struct {
	reg    *replicas.Registry
	leader *Leader
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// multiReplica reports whether this installation runs replicas: a
// PostgreSQL database.
func (a *App) multiReplica() bool { return a.DB != nil && a.DB.Dialector.Name() == "postgres" }

// newReplication builds this replica's registry and leader campaign.
func (a *App) newReplication(cfg Config) error {
	if !a.multiReplica() {
		return nil
	}
	url := cfg.InternalURL
	if url == "" {
		url = cfg.PublicURL
	}
	reg, err := replicas.New(a.DB, replicas.Config{InternalURL: url, Key: web.Derive(cfg.RootKey, "replicas-internal"),
		Clock: a.Clock, Logger: a.log})
	if err != nil {
		return err
	}
	a.Replicas = reg
	a.Leader = newLeader(a.DB, reg.Self().ID, a.Clock, a.log)
	return nil
}

// startReplication registers this replica and starts the campaign.
func (a *App) startReplication(ctx context.Context) error {
	if a.Replicas == nil {
		return nil
	}
	if err := a.Replicas.Start(ctx); err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.repl.cancel = cancel
	a.repl.done.Add(1)
	go func() {
		defer a.repl.done.Done()
		a.Leader.Run(cctx)
	}()
	return nil
}

// closeReplication stops leading (the singleton loops end, the lease is
// released) and frees this replica's VM leases, after the VM pools closed.
func (a *App) closeReplication() {
	if a.Replicas == nil {
		return
	}
	if a.repl.cancel != nil {
		a.repl.cancel()
		a.repl.done.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Replicas.Close(ctx); err != nil {
		a.log.Warn("close replica registration", "err", err)
	}
}

// singleton runs fn, a loop only one replica of the installation runs: at
// once with one server, on the leader (whenever this replica leads) with
// replicas. fn ends when ctx does (or this replica's term). wait waits for
// it to end after ctx did (with replicas, closeReplication does).
func (a *App) singleton(ctx context.Context, name string, fn func(ctx context.Context)) (wait func()) {
	if a.Leader == nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			fn(ctx)
		}()
		return func() { <-done }
	}
	a.Leader.Go(name, func(lctx context.Context) {
		if ctx.Err() != nil {
			return
		}
		lctx, cancel := context.WithCancel(lctx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		fn(lctx)
	})
	return func() {}
}

// vmLeases are the VM pools' channel leases: none with one server.
func (a *App) vmLeases() vmpool.Leases {
	if a.Replicas == nil {
		return nil
	}
	return a.Replicas
}

// leading is the VM pools' leader gate: nil (always) with one server.
func (a *App) leading() func() bool {
	if a.Leader == nil {
		return nil
	}
	return a.Leader.Leading
}

// replicationStatus is /readyz's detail: leadership and lease health.
func (a *App) replicationStatus() func(ctx context.Context) (*api.Replication, error) {
	if a.Replicas == nil {
		return nil
	}
	return func(ctx context.Context) (*api.Replication, error) {
		self := a.Replicas.Self()
		out := &api.Replication{Replica: self.ID, InternalURL: self.InternalURL, Leader: a.Leader.Leading()}
		h, err := a.Replicas.Health(ctx)
		if err != nil {
			return out, err
		}
		out.Replicas, out.VMLeases, out.VMLeasesHeld, out.VMLeasesExpired = h.Replicas, h.Leases, h.LeasesHeld, h.LeasesExpired
		l, err := tenants.CurrentLease(ctx, a.DB)
		if err != nil {
			return out, err
		}
		if l.ExpiresAt.After(a.Clock.Now()) {
			out.LeaderReplica = l.Holder
		}
		out.LeaderEpoch = l.Epoch
		return out, nil
	}
}

// registerReplicaMetrics puts the lease metrics on /metrics.
func (a *App) registerReplicaMetrics(reg *prometheus.Registry) error {
	if a.Replicas == nil {
		return nil
	}
	return reg.Register(replicas.NewCollector(a.Replicas, func() (bool, int64) { return a.Leader.Leading(), a.Leader.Epoch() }))
}

// forwardOwners are the VM channel owners requests are forwarded to
// (web/forward), from this replica's registry; nil with one server.
func (a *App) forwardOwners() forward.Owners {
	if a.Replicas == nil {
		return nil
	}
	return registryOwners{a.Replicas}
}

type registryOwners struct{ r *replicas.Registry }

func (o registryOwners) Self() forward.Replica {
	s := o.r.Self()
	return forward.Replica{ID: s.ID, InternalURL: s.InternalURL}
}

func (o registryOwners) OwnerOf(ctx context.Context, vmID string) (forward.Replica, error) {
	r, err := o.r.OwnerOf(ctx, vmID)
	return forward.Replica{ID: r.ID, InternalURL: r.InternalURL}, err
}
