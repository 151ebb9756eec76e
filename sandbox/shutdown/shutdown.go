// Package shutdown is a long-lived service's "until Close": a channel the
// service closes once, instead of a context kept in the service's struct
// (contexts are passed, never stored), with the one conversion such
// services need, a context that also ends at Close.
package shutdown

import (
	"context"
	"sync"
	"time"
)

// Signal is closed once, by its service's Close. The zero value is not
// usable; use New.
type Signal struct {
	once sync.Once
	ch   chan struct{}
}

// New returns an open Signal.
func New() *Signal { return &Signal{ch: make(chan struct{})} }

// Close closes the signal; later calls do nothing.
func (s *Signal) Close() { s.once.Do(func() { close(s.ch) }) }

// Done is closed by Close.
func (s *Signal) Done() <-chan struct{} { return s.ch }

// Err is nil until Close and context.Canceled after, as the context it
// replaces said.
func (s *Signal) Err() error {
	select {
	case <-s.ch:
		return context.Canceled
	default:
		return nil
	}
}

// Bound returns a child of parent that also ends at Close (at once if the
// signal is already closed). Call cancel when done with it.
func (s *Signal) Bound(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	select {
	case <-s.ch:
		cancel()
		return ctx, cancel
	default:
	}
	go func() {
		select {
		case <-s.ch:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// WithTimeout is Bound with a timeout.
func (s *Signal) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	tctx, cancelT := context.WithTimeout(parent, d)
	ctx, cancel := s.Bound(tctx)
	return ctx, func() { cancel(); cancelT() }
}
