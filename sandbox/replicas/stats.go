package replicas

import "sync/atomic"

// stats counts what this replica did with VM leases since it started.
type stats struct {
	adopted   atomic.Int64 // leases taken at adoption (absent or expired)
	failovers atomic.Int64 // of those, taken from another replica whose lease expired
	lost      atomic.Int64 // leases this replica held that it had to let go of
	forwards  atomic.Int64 // requests forwarded to an owner (fwd counts them)
}

// Stats is what Registry.Stats reports (for /metrics).
type Stats struct {
	Held, Adopted, Failovers, Lost, Forwards int64
}

// Stats counts this replica's leases and what happened to them.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	held := int64(len(r.held))
	r.mu.Unlock()
	return Stats{Held: held, Adopted: r.stats.adopted.Load(), Failovers: r.stats.failovers.Load(),
		Lost: r.stats.lost.Load(), Forwards: r.stats.forwards.Load()}
}

// Forwarded counts one request forwarded to the owner of a VM's channel.
func (r *Registry) Forwarded() { r.stats.forwards.Add(1) }
