package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
)

// serveLease takes the installation lease before serve touches any VM: one
// server per installation (data directory or database) at a time, until
// replicas share VMs safely. With wait it waits for the holder to stop (or
// its lease to expire); without, a held lease is an error naming the
// holder. The returned context ends when the lease is lost, and release
// frees the lease so a restart is immediate. leaseLost tells serve's end
// apart from a lost lease.
func serveLease(ctx context.Context, db *gorm.DB, clock clockwork.Clock, wait bool, log *slog.Logger) (context.Context, func(), error) {
	cfg := tenants.LeaseConfig{Logger: log, Clock: clock}
	var (
		lease *tenants.Lease
		err   error
	)
	if wait {
		lease, err = tenants.WaitLease(ctx, db, cfg, time.Second, func(h tenants.LeaseHolder) {
			log.Warn("waiting for the installation lease", "holder_host", h.Hostname, "holder_pid", h.PID,
				"holder_started_at", h.StartedAt, "expires_at", h.ExpiresAt)
		})
	} else {
		lease, err = tenants.AcquireLease(ctx, db, cfg)
	}
	if errors.Is(err, tenants.ErrLeaseHeld) {
		return nil, nil, fmt.Errorf("another stockade serve runs this installation (same data directory or database): %w; "+
			"stop it first, or start with --wait-lease to wait for it", err)
	}
	if err != nil {
		return nil, nil, err
	}
	log.Info("installation lease taken", "holder", lease.Holder(), "epoch", lease.Epoch())
	lctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lease.Lost():
			log.Error("installation lease lost: stopping", "err", lease.Err())
			cancel(lease.Err())
		case <-lctx.Done():
		}
	}()
	release := func() {
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer rcancel()
		if err := lease.Release(rctx); err != nil {
			log.Warn("release installation lease", "err", err)
		}
	}
	return lctx, release, nil
}

// leaseLost is the error a lost lease ended ctx with, else nil.
func leaseLost(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && !errors.Is(c, context.DeadlineExceeded) {
		return c
	}
	return nil
}
