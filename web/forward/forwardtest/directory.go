// Package forwardtest has a replica directory for tests of forwarding
// between in-process servers: which replica owns which VM's channel is
// whatever the test says (sandbox/replicas decides it from leases).
package forwardtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/web/forward"
)

// Directory is the replicas of a test and the owners of VM channels.
type Directory struct {
	mu     sync.Mutex
	urls   map[string]string // replica id -> internal URL
	owners map[string]string // vm id -> replica id
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory {
	return &Directory{urls: map[string]string{}, owners: map[string]string{}}
}

// SetURL says where replica id is reached.
func (d *Directory) SetURL(id, url string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.urls[id] = url
}

// Own makes replica id the owner of vmID's channel; "" leaves it without
// an owner (a lease expired).
func (d *Directory) Own(vmID, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id == "" {
		delete(d.owners, vmID)
		return
	}
	d.owners[vmID] = id
}

// Replica is the directory as replica id sees it.
func (d *Directory) Replica(id string) forward.Owners { return view{d: d, id: id} }

type view struct {
	d  *Directory
	id string
}

func (v view) Self() forward.Replica {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	return forward.Replica{ID: v.id, InternalURL: v.d.urls[v.id]}
}

func (v view) OwnerOf(_ context.Context, vmID string) (forward.Replica, error) {
	v.d.mu.Lock()
	defer v.d.mu.Unlock()
	id, ok := v.d.owners[vmID]
	if !ok {
		return forward.Replica{}, fmt.Errorf("owner of vm %s: %w", vmID, errdefs.Unavailable("channel owner"))
	}
	return forward.Replica{ID: id, InternalURL: v.d.urls[id]}, nil
}
