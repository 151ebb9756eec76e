// Package clocktest has fake-clock helpers for tests.
package clocktest

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// Auto returns a fake clock standing at start that moves on by step
// whenever something waits on it (a timer, a ticker, After), until the test
// ends: waits such as retry backoffs cost no real time, still happen in
// order, and show in the times the code under test records.
func Auto(t testing.TB, start time.Time, step time.Duration) *clockwork.FakeClock {
	clk := clockwork.NewFakeClockAt(start)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for clk.BlockUntilContext(ctx, 1) == nil {
			clk.Advance(step)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return clk
}
