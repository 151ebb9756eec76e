package agentproto

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The sustained-throughput baseline (BaselineLoop): each of Concurrency
// workers repeats one task (at least once) until Duration has passed since
// the start, then finishes the task it is in. A task is the agent task of the sandbox
// benchmark done with raw crun: `crun run --detach` of the template with a
// writable /workspace, write a file there, `crun exec` a command reading it
// and read its output, `crun delete --force`.

// Bounds of a loop request.
const (
	MaxLoopConcurrency = 16
	MaxLoopDuration    = 3 * time.Minute
)

// LoopResult is how many tasks the workers completed and the time from the
// start until the last one ended.
type LoopResult struct {
	Tasks   int           `json:"tasks"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// CheckLoop checks a BaselineLoop request's concurrency and duration.
func (r BaselineRequest) CheckLoop() error {
	if r.Concurrency < 1 || r.Concurrency > MaxLoopConcurrency {
		return fmt.Errorf("baseline loop: concurrency %d (1 to %d): %w", r.Concurrency, MaxLoopConcurrency, ErrBadRequest)
	}
	if r.Duration <= 0 || r.Duration > MaxLoopDuration {
		return fmt.Errorf("baseline loop: duration %v (up to %v): %w", r.Duration, MaxLoopDuration, ErrBadRequest)
	}
	return nil
}

// Check bounds what a guest answered to a loop request of duration d:
// nothing it says is trusted, even in a benchmark.
func (l *LoopResult) Check(req BaselineRequest) error {
	// A worker's last task may end well after the deadline, but not after
	// the call's own bound.
	if l == nil || l.Tasks < 0 || l.Elapsed < req.Duration || l.Elapsed > req.Duration+MaxLoopDuration {
		return fmt.Errorf("baseline loop: result %+v for %v: %w", l, req.Duration, ErrProtocol)
	}
	return nil
}

// RunLoop runs task with concurrency workers until d has passed since the
// start, each at least once and each finishing the task it is in; the
// first error stops the others (their tasks see ctx cancelled). The guest's
// BaselineLoop and the benchmark's loop through the API both run on it, so
// the two are counted alike.
func RunLoop(ctx context.Context, concurrency int, d time.Duration, task func(ctx context.Context, worker, i int) error) (LoopResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	deadline := start.Add(d)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		tasks int
	)
	for w := range concurrency {
		wg.Go(func() {
			for i := 0; i == 0 || time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				if err := task(ctx, w, i); err != nil {
					cancel(err)
					return
				}
				mu.Lock()
				tasks++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return LoopResult{Tasks: tasks, Elapsed: time.Since(start)}, context.Cause(ctx)
}
