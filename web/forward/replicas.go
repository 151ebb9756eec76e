package forward

import (
	"context"

	"github.com/stockade-dev/stockade/sandbox/replicas"
)

// Registry is the Owners of a replicas registry: the channel leases in the
// database say who owns a VM, the registrations where it is reached. Its
// Key is the one to give Config.Key.
func Registry(r *replicas.Registry) Owners { return registry{r} }

type registry struct{ r *replicas.Registry }

func (g registry) Self() Replica {
	s := g.r.Self()
	return Replica{ID: s.ID, InternalURL: s.InternalURL}
}

func (g registry) OwnerOf(ctx context.Context, vmID string) (Replica, error) {
	o, err := g.r.OwnerOf(ctx, vmID)
	if err != nil {
		return Replica{}, err
	}
	return Replica{ID: o.ID, InternalURL: o.InternalURL}, nil
}
