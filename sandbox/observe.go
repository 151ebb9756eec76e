package sandbox

import "sync"

// endObservers are told when a sandbox ends (destroyed or failed), so that
// what hangs off it — live terminals — ends at once with the same reason.
type endObservers struct {
	mu  sync.Mutex
	fns []func(tenantID, sandboxID, reason string)
}

func (o *endObservers) add(fn func(tenantID, sandboxID, reason string)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fns = append(o.fns, fn)
}

func (o *endObservers) notify(tenantID, sandboxID, reason string) {
	o.mu.Lock()
	fns := append([]func(string, string, string){}, o.fns...)
	o.mu.Unlock()
	for _, fn := range fns {
		fn(tenantID, sandboxID, reason)
	}
}

// OnEnd registers fn to run whenever a sandbox ends, with its reason.
func (s *Service) OnEnd(fn func(tenantID, sandboxID, reason string)) { s.ended.add(fn) }

// OnEnding registers fn to run just before a sandbox is destroyed, with
// the reason it will end with ("" when the destroy failed and it runs on):
// a terminal then ends with that reason rather than with its stream's.
func (s *Service) OnEnding(fn func(tenantID, sandboxID, reason string)) { s.ending.add(fn) }
