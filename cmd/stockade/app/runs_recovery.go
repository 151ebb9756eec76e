package app

import (
	"context"
	"time"
)

// Workflow runs with replicas (runs_recovery.go): each run records the
// replica executing it; the leader fails the runs of replicas that are
// gone, at its term's start and every runOrphanInterval after, never those
// a live replica executes.

// runOrphanInterval is how often the leader looks for runs whose replica
// is gone (its registration expires 10 s after its last heartbeat).
const runOrphanInterval = 10 * time.Second

// recoverRuns is the leader's run recovery loop, for one term.
func (a *App) recoverRuns(ctx context.Context) {
	if err := a.Runs.Recover(ctx); err != nil && ctx.Err() == nil {
		a.log.Error("recover workflow runs", "err", err)
	}
	t := a.Clock.NewTicker(runOrphanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if err := a.Runs.RecoverOrphans(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("recover workflow runs of gone replicas", "err", err)
		}
	}
}

// replicaID is this replica's id for the run engine; "" with one server.
func (a *App) replicaID() string {
	if a.Replicas == nil {
		return ""
	}
	return a.Replicas.ID()
}

// liveReplicas lists the live replicas' ids for the run engine; nil with
// one server.
func (a *App) liveReplicas() func(ctx context.Context) ([]string, error) {
	if a.Replicas == nil {
		return nil
	}
	return func(ctx context.Context) ([]string, error) {
		rs, err := a.Replicas.Replicas(ctx)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.ID
		}
		return ids, nil
	}
}
