package hypervisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirt"
)

// Domain is a VM this host just created.
type Domain struct {
	ID       string
	TenantID string
	Name     string // libvirt name, DomainName(ID)
	UUID     string
}

// State is libvirt's domain state, lower case.
type State string

const (
	StateNoState     State = "nostate"
	StateRunning     State = "running"
	StateBlocked     State = "blocked"
	StatePaused      State = "paused"
	StateShutdown    State = "shutdown" // shutting down
	StateShutoff     State = "shutoff"
	StateCrashed     State = "crashed"
	StatePMSuspended State = "pmsuspended"
)

// DomainInfo is what libvirt reports about one of our domains.
type DomainInfo struct {
	ID             string
	TenantID       string
	InstallationID string
	Name           string
	UUID           string
	State          State
	CPUTime        time.Duration // guest CPU time consumed so far
	MemoryKiB      uint64        // current allocation
	VCPUs          int
}

// Capacity is the host's size and what this installation runs on it.
type Capacity struct {
	CPUs            int
	MemoryTotalKiB  uint64
	MemoryFreeKiB   uint64
	Domains         int // running domains of this installation
	DomainVCPUs     int // their vCPUs
	DomainMemoryKiB uint64
}

// learnDomains fills the identity cache from every domain that carries our
// metadata namespace, so stop events of domains created before a restart
// can still be attributed.
func (h *Host) learnDomains(ctx context.Context, s *session) error {
	doms, err := s.conn.ListAllDomains(0)
	if err != nil {
		return fmt.Errorf("list domains: %w", classify(err))
	}
	defer freeAll(doms)
	for i := range doms {
		if ctx.Err() != nil {
			return fmt.Errorf("list domains: %w", ctx.Err())
		}
		name, err := doms[i].GetName()
		if err != nil {
			continue
		}
		if _, ok := idFromName(name); !ok {
			continue
		}
		if id, err := readIdentity(&doms[i]); err == nil {
			h.known.put(name, id)
		}
	}
	return nil
}

// Create defines and starts a transient domain: when it stops, for whatever
// reason, libvirt forgets it, so a failure at any step leaves nothing behind.
// An existing domain with the same name is ErrConflict.
func (h *Host) Create(ctx context.Context, spec DomainSpec) (*Domain, error) {
	switch spec.InstallationID {
	case "":
		spec.InstallationID = h.cfg.InstallationID
	case h.cfg.InstallationID:
	default:
		return nil, fmt.Errorf("create vm %s: %w: installation %q is not this host's %q",
			spec.ID, ErrInvalid, spec.InstallationID, h.cfg.InstallationID)
	}
	if spec.Type == "" {
		t, err := h.DomainType(ctx)
		if err != nil {
			return nil, fmt.Errorf("create vm %s: %w", spec.ID, err)
		}
		spec.Type = t
	}
	def, err := BuildDomain(spec)
	if err != nil {
		return nil, fmt.Errorf("create vm %s: %w", spec.ID, err)
	}
	xml, err := def.Marshal()
	if err != nil {
		return nil, fmt.Errorf("create vm %s: marshal domain: %w", spec.ID, err)
	}

	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("create vm %s: %w", spec.ID, err)
	}
	defer release()
	name := DomainName(spec.ID)
	if dom, err := s.conn.LookupDomainByName(name); err == nil {
		dom.Free()
		return nil, fmt.Errorf("create vm %s: %w: domain %s exists", spec.ID, ErrConflict, name)
	} else if libvirtCode(err) != libvirt.ERR_NO_DOMAIN {
		return nil, fmt.Errorf("create vm %s: %w", spec.ID, h.fail(err))
	}

	// Known before it starts, so its first events are attributed.
	h.known.put(name, identity{ID: spec.ID, TenantID: spec.TenantID, InstallationID: spec.InstallationID})
	dom, err := s.conn.DomainCreateXML(xml, libvirt.DOMAIN_NONE)
	if err != nil {
		cerr := h.fail(err)
		// Lost a race with another creator of the same name?
		if other, lerr := s.conn.LookupDomainByName(name); lerr == nil {
			other.Free()
			return nil, fmt.Errorf("create vm %s: %w: %w", spec.ID, ErrConflict, err)
		}
		h.known.forget(name)
		h.removeLog(spec.ID) // QEMU may have logged its failure: nothing remains
		return nil, fmt.Errorf("create vm %s: %w", spec.ID, cerr)
	}
	defer dom.Free()
	uuid, err := dom.GetUUIDString()
	if err != nil {
		// Started but unusable: take it down again rather than leak it.
		_ = dom.Destroy()
		return nil, fmt.Errorf("create vm %s: read uuid: %w", spec.ID, h.fail(err))
	}
	return &Domain{ID: spec.ID, TenantID: spec.TenantID, Name: name, UUID: uuid}, nil
}

// lookupOurs finds the domain with this id and checks its metadata names our
// installation. Anything else is ErrNotFound: we never touch it.
func (h *Host) lookupOurs(s *session, id string) (*libvirt.Domain, identity, error) {
	if !validID.MatchString(id) {
		return nil, identity{}, fmt.Errorf("%w: id %q", ErrNotFound, id)
	}
	dom, err := s.conn.LookupDomainByName(DomainName(id))
	if err != nil {
		return nil, identity{}, h.fail(err)
	}
	ident, err := readIdentity(dom)
	if err != nil {
		dom.Free()
		if err := h.fail(err); errors.Is(err, ErrUnavailable) {
			return nil, identity{}, err
		}
		// No metadata, or not ours in a form we can read: not ours.
		return nil, identity{}, fmt.Errorf("%w: %s has no stockade metadata of ours: %w", ErrNotFound, DomainName(id), err)
	}
	if ident.InstallationID != h.cfg.InstallationID || ident.ID != id {
		dom.Free()
		return nil, identity{}, fmt.Errorf("%w: %s belongs to installation %q", ErrNotFound, DomainName(id), ident.InstallationID)
	}
	return dom, ident, nil
}

// Lookup reports one of our domains; ErrNotFound when there is none.
func (h *Host) Lookup(ctx context.Context, id string) (DomainInfo, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return DomainInfo{}, fmt.Errorf("lookup vm %s: %w", id, err)
	}
	defer release()
	dom, ident, err := h.lookupOurs(s, id)
	if err != nil {
		return DomainInfo{}, fmt.Errorf("lookup vm %s: %w", id, err)
	}
	defer dom.Free()
	info, err := h.info(dom, ident)
	if err != nil {
		return DomainInfo{}, fmt.Errorf("lookup vm %s: %w", id, err)
	}
	return info, nil
}

// List returns only the domains whose metadata carries this installation's
// id, sorted by id.
func (h *Host) List(ctx context.Context) ([]DomainInfo, error) {
	out, err := h.list(ctx, func(id identity) bool { return id.InstallationID == h.cfg.InstallationID })
	if err != nil {
		return nil, fmt.Errorf("list vms: %w", err)
	}
	return out, nil
}

// ListForeign returns domains with Stockade metadata of other installations:
// for display only, never to be touched.
func (h *Host) ListForeign(ctx context.Context) ([]DomainInfo, error) {
	out, err := h.list(ctx, func(id identity) bool { return id.InstallationID != h.cfg.InstallationID })
	if err != nil {
		return nil, fmt.Errorf("list foreign vms: %w", err)
	}
	return out, nil
}

func (h *Host) list(ctx context.Context, keep func(identity) bool) ([]DomainInfo, error) {
	return h.listFlags(ctx, 0, keep)
}

func (h *Host) listFlags(ctx context.Context, flags libvirt.ConnectListAllDomainsFlags, keep func(identity) bool) ([]DomainInfo, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	doms, err := s.conn.ListAllDomains(flags)
	if err != nil {
		return nil, h.fail(err)
	}
	defer freeAll(doms)
	var out []DomainInfo
	for i := range doms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dom := &doms[i]
		ident, err := readIdentity(dom)
		if err != nil {
			switch libvirtCode(err) {
			case libvirt.ERR_NO_DOMAIN_METADATA, libvirt.ERR_NO_DOMAIN:
				continue // not ours, or gone since the listing
			}
			if errors.Is(err, ErrUnavailable) {
				return nil, h.fail(err)
			}
			continue // unparsable metadata: not something we made
		}
		if !keep(ident) {
			continue
		}
		info, err := h.info(dom, ident)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return nil, err
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b DomainInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (h *Host) info(dom *libvirt.Domain, ident identity) (DomainInfo, error) {
	name, err := dom.GetName()
	if err != nil {
		return DomainInfo{}, h.fail(err)
	}
	uuid, err := dom.GetUUIDString()
	if err != nil {
		return DomainInfo{}, h.fail(err)
	}
	gi, err := dom.GetInfo()
	if err != nil {
		return DomainInfo{}, h.fail(err)
	}
	return DomainInfo{
		ID:             ident.ID,
		TenantID:       ident.TenantID,
		InstallationID: ident.InstallationID,
		Name:           name,
		UUID:           uuid,
		State:          stateName(gi.State),
		CPUTime:        time.Duration(gi.CpuTime),
		MemoryKiB:      gi.Memory,
		VCPUs:          int(gi.NrVirtCpu),
	}, nil
}

// Destroy stops the domain at once and removes every trace libvirt keeps of
// it, QEMU's log included (see Config.QEMULogDir). ErrNotFound when it does
// not exist or is not ours; for one of ours that already died on its own,
// the log it left is removed all the same.
func (h *Host) Destroy(ctx context.Context, id string) error {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("destroy vm %s: %w", id, err)
	}
	defer release()
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) && h.wasOurs(s, id) {
			h.removeLog(id)
		}
		return fmt.Errorf("destroy vm %s: %w", id, err)
	}
	defer dom.Free()
	defer h.removeLog(id)
	if active, err := dom.IsActive(); err == nil && active {
		// A transient domain vanishes here; stopping on its own meanwhile is fine too.
		if err := dom.Destroy(); err != nil && !ignorable(err) {
			return fmt.Errorf("destroy vm %s: %w", id, h.fail(err))
		}
	}
	if persistent, err := dom.IsPersistent(); err == nil && persistent {
		if err := dom.UndefineFlags(libvirt.DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA); err != nil && !ignorable(err) {
			return fmt.Errorf("undefine vm %s: %w", id, h.fail(err))
		}
	}
	return nil
}

// wasOurs: no domain of that name exists now, and the last one we saw was ours.
func (h *Host) wasOurs(s *session, id string) bool {
	if !validID.MatchString(id) {
		return false
	}
	known, ok := h.known.get(DomainName(id))
	if !ok || known.InstallationID != h.cfg.InstallationID {
		return false
	}
	dom, err := s.conn.LookupDomainByName(DomainName(id))
	if err == nil {
		dom.Free()
		return false
	}
	return libvirtCode(err) == libvirt.ERR_NO_DOMAIN
}

// removeLog deletes the QEMU log libvirt kept for a domain of ours that no
// longer exists; with many short-lived VMs these pile up otherwise.
func (h *Host) removeLog(id string) {
	if h.cfg.QEMULogDir == "" {
		return
	}
	name := filepath.Join(h.cfg.QEMULogDir, DomainName(id)+".log")
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.log.Warn("remove qemu log", "file", name, "err", err)
	}
}

// ignorable: the domain is already gone or already stopped.
func ignorable(err error) bool {
	switch libvirtCode(err) {
	case libvirt.ERR_NO_DOMAIN, libvirt.ERR_OPERATION_INVALID:
		return true
	}
	return false
}

// Shutdown asks the guest to power off (ACPI power button); it returns before
// the guest has done so. A domain that is not running is ErrConflict.
func (h *Host) Shutdown(ctx context.Context, id string) error {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("shutdown vm %s: %w", id, err)
	}
	defer release()
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return fmt.Errorf("shutdown vm %s: %w", id, err)
	}
	defer dom.Free()
	if err := dom.Shutdown(); err != nil {
		return fmt.Errorf("shutdown vm %s: %w", id, h.fail(err))
	}
	return nil
}

// Capacity reports the host's CPUs and memory and what our running domains use.
func (h *Host) Capacity(ctx context.Context) (Capacity, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return Capacity{}, fmt.Errorf("host capacity: %w", err)
	}
	ni, err := s.conn.GetNodeInfo()
	if err != nil {
		release()
		return Capacity{}, fmt.Errorf("host capacity: node info: %w", h.fail(err))
	}
	free, err := availableMemory(s.conn)
	release()
	if err != nil {
		return Capacity{}, fmt.Errorf("host capacity: free memory: %w", h.fail(err))
	}
	running, err := h.listFlags(ctx, libvirt.CONNECT_LIST_DOMAINS_ACTIVE,
		func(id identity) bool { return id.InstallationID == h.cfg.InstallationID })
	if err != nil {
		return Capacity{}, fmt.Errorf("host capacity: %w", err)
	}
	c := Capacity{CPUs: int(ni.Cpus), MemoryTotalKiB: ni.Memory, MemoryFreeKiB: free / 1024, Domains: len(running)}
	for _, d := range running {
		c.DomainVCPUs += d.VCPUs
		c.DomainMemoryKiB += d.MemoryKiB
	}
	return c, nil
}

// availableMemory is the memory the host can give a new VM, in bytes: free
// memory plus the page cache and buffers the kernel drops under pressure
// (like MemAvailable). Free memory alone counts a host whose RAM holds
// cached guest images as full: a busy build host showed 1.3 GiB "free" out
// of 22 GiB available and refused every boot. Drivers without node memory
// stats (test:///) answer free memory.
func availableMemory(conn *libvirt.Connect) (uint64, error) {
	st, err := conn.GetMemoryStats(libvirt.NODE_MEMORY_STATS_ALL_CELLS, 0)
	if err != nil || !st.FreeSet {
		return conn.GetFreeMemory()
	}
	kib := st.Free
	if st.BuffersSet {
		kib += st.Buffers
	}
	if st.CachedSet {
		kib += st.Cached
	}
	return kib * 1024, nil
}

func stateName(s libvirt.DomainState) State {
	switch s {
	case libvirt.DOMAIN_RUNNING:
		return StateRunning
	case libvirt.DOMAIN_BLOCKED:
		return StateBlocked
	case libvirt.DOMAIN_PAUSED:
		return StatePaused
	case libvirt.DOMAIN_SHUTDOWN:
		return StateShutdown
	case libvirt.DOMAIN_SHUTOFF:
		return StateShutoff
	case libvirt.DOMAIN_CRASHED:
		return StateCrashed
	case libvirt.DOMAIN_PMSUSPENDED:
		return StatePMSuspended
	}
	return StateNoState
}

func freeAll(doms []libvirt.Domain) {
	for i := range doms {
		doms[i].Free()
	}
}
