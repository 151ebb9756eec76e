package hypervisortest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
)

// Host is what the conformance suite drives: the part of *hypervisor.Host a
// consumer uses. A fake must pass the same suite as the real driver.
type Host interface {
	Create(ctx context.Context, s hypervisor.DomainSpec) (*hypervisor.Domain, error)
	Lookup(ctx context.Context, id string) (hypervisor.DomainInfo, error)
	List(ctx context.Context) ([]hypervisor.DomainInfo, error)
	ListForeign(ctx context.Context) ([]hypervisor.DomainInfo, error)
	Destroy(ctx context.Context, id string) error
	Shutdown(ctx context.Context, id string) error
	Capacity(ctx context.Context) (hypervisor.Capacity, error)
	Events() <-chan hypervisor.Event
	InstallationID() string
}

// Options adapt the suite to a backend.
type Options struct {
	// Spec returns a bootable spec for a new VM (kernel paths and so on).
	Spec func(id, tenant string) hypervisor.DomainSpec
	// Other returns a Host of another installation on the same backend.
	Other func(t *testing.T) Host
	// DefineRaw defines, without starting, a domain from raw XML behind the
	// driver's back and undefines it at cleanup. Nil skips those checks.
	DefineRaw func(t *testing.T, xml string)
	// Exists reports, behind the driver's back, whether a domain of that
	// name is still defined. Used with DefineRaw.
	Exists func(t *testing.T, name string) bool
	// Ready waits until the guest would act on a shutdown request. Nil: at once.
	Ready func(t *testing.T, h Host, id string)
	// EventTimeout bounds waiting for an event; 10 s when zero.
	EventTimeout time.Duration
	// ShutdownTimeout bounds a guest's ACPI shutdown; 30 s when zero.
	ShutdownTimeout time.Duration
}

// RunConformance checks the Host contract. Subtests run in order and share
// the Host's one Events channel, so none of them runs in parallel.
func RunConformance(t *testing.T, newHost func(t *testing.T) Host, opts Options) {
	if opts.EventTimeout == 0 {
		opts.EventTimeout = 10 * time.Second
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	h := newHost(t)
	c := &conformance{h: h, opts: opts}
	t.Run("CreateLookupListDestroy", c.createLookupListDestroy)
	t.Run("CreateTwiceConflicts", c.createTwiceConflicts)
	t.Run("UnknownIDsAreNotFound", c.unknownIDs)
	t.Run("InvalidSpec", c.invalidSpec)
	t.Run("Capacity", c.capacity)
	t.Run("CPUTime", c.cpuTime)
	t.Run("OtherInstallationsUntouched", c.otherInstallations)
	t.Run("Shutdown", c.shutdown)
}

type conformance struct {
	h    Host
	opts Options
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a VM and destroys it at cleanup if the test did not.
func (c *conformance) create(t *testing.T, h Host, id, tenant string) *hypervisor.Domain {
	t.Helper()
	d, err := h.Create(ctxFor(t), c.opts.Spec(id, tenant))
	if err != nil {
		t.Fatalf("Create(%s) error = %v; want nil", id, err)
	}
	t.Cleanup(func() {
		if err := h.Destroy(context.Background(), id); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("cleanup Destroy(%s) error = %v", id, err)
		}
	})
	return d
}

// waitEvent reads Events until one for id matches, skipping the rest.
func waitEvent(t *testing.T, h Host, id string, timeout time.Duration, match func(hypervisor.Event) bool) hypervisor.Event {
	t.Helper()
	deadline := time.After(timeout)
	var seen []hypervisor.Event
	for {
		select {
		case ev, ok := <-h.Events():
			if !ok {
				t.Fatalf("Events() closed while waiting for an event of %s", id)
			}
			if ev.ID == id && match(ev) {
				return ev
			}
			seen = append(seen, ev)
		case <-deadline:
			t.Fatalf("no matching event for %s within %s; saw %+v", id, timeout, seen)
		}
	}
}

func ids(infos []hypervisor.DomainInfo) []string {
	out := make([]string, len(infos))
	for i, d := range infos {
		out[i] = d.ID
	}
	return out
}

func (c *conformance) createLookupListDestroy(t *testing.T) {
	ctx := ctxFor(t)
	id, tenant := NewID("conf-"), "tenant-a"
	spec := c.opts.Spec(id, tenant)
	d := c.create(t, c.h, id, tenant)
	if d.ID != id || d.TenantID != tenant || d.Name != hypervisor.DomainName(id) || d.UUID == "" {
		t.Errorf("Create(%s) = %+v; want ID %s, tenant %s, name %s and a UUID", id, d, id, tenant, hypervisor.DomainName(id))
	}
	waitEvent(t, c.h, id, c.opts.EventTimeout, func(ev hypervisor.Event) bool {
		return ev.Kind == hypervisor.KindStarted
	})

	info, err := c.h.Lookup(ctx, id)
	if err != nil {
		t.Fatalf("Lookup(%s) error = %v; want nil", id, err)
	}
	want := hypervisor.DomainInfo{ID: id, TenantID: tenant, InstallationID: c.h.InstallationID(),
		Name: hypervisor.DomainName(id), UUID: d.UUID, State: hypervisor.StateRunning, VCPUs: spec.VCPUs,
		MemoryKiB: uint64(spec.MemoryMiB) * 1024}
	info.CPUTime = 0
	if info != want {
		t.Errorf("Lookup(%s) = %+v; want %+v", id, info, want)
	}

	list, err := c.h.List(ctx)
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	if !slices.Contains(ids(list), id) {
		t.Errorf("List() = %v; want it to contain %s", ids(list), id)
	}
	for _, d := range list {
		if d.InstallationID != c.h.InstallationID() {
			t.Errorf("List() has %s of installation %q; want only %q", d.ID, d.InstallationID, c.h.InstallationID())
		}
	}

	if err := c.h.Destroy(ctx, id); err != nil {
		t.Fatalf("Destroy(%s) error = %v; want nil", id, err)
	}
	ev := waitEvent(t, c.h, id, c.opts.EventTimeout, func(ev hypervisor.Event) bool {
		return ev.Kind == hypervisor.KindStopped
	})
	if ev.Reason != "destroyed" || ev.TenantID != tenant {
		t.Errorf("stop event after Destroy = %+v; want reason destroyed, tenant %s", ev, tenant)
	}
	if _, err := c.h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("Lookup(%s) after Destroy error = %v; want ErrNotFound", id, err)
	}
	if list, err := c.h.List(ctx); err != nil || slices.Contains(ids(list), id) {
		t.Errorf("List() after Destroy = %v, %v; want no %s", ids(list), err, id)
	}
	if err := c.h.Destroy(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("second Destroy(%s) error = %v; want ErrNotFound", id, err)
	}
}

func (c *conformance) createTwiceConflicts(t *testing.T) {
	ctx := ctxFor(t)
	id := NewID("conf-")
	c.create(t, c.h, id, "tenant-a")
	if _, err := c.h.Create(ctx, c.opts.Spec(id, "tenant-b")); !errors.Is(err, hypervisor.ErrConflict) {
		t.Errorf("second Create(%s) error = %v; want ErrConflict", id, err)
	}
	info, err := c.h.Lookup(ctx, id)
	if err != nil || info.TenantID != "tenant-a" || info.State != hypervisor.StateRunning {
		t.Errorf("Lookup(%s) after conflict = %+v, %v; want the first VM, running", id, info, err)
	}
}

func (c *conformance) unknownIDs(t *testing.T) {
	ctx := ctxFor(t)
	for _, id := range []string{NewID("never-"), "", "../../etc/passwd", "a b"} {
		t.Run(id, func(t *testing.T) {
			if _, err := c.h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
				t.Errorf("Lookup(%q) error = %v; want ErrNotFound", id, err)
			}
			if err := c.h.Destroy(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
				t.Errorf("Destroy(%q) error = %v; want ErrNotFound", id, err)
			}
			if err := c.h.Shutdown(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
				t.Errorf("Shutdown(%q) error = %v; want ErrNotFound", id, err)
			}
		})
	}
}

func (c *conformance) invalidSpec(t *testing.T) {
	ctx := ctxFor(t)
	tests := []struct {
		name string
		edit func(*hypervisor.DomainSpec)
	}{
		{"no vcpus", func(s *hypervisor.DomainSpec) { s.VCPUs = 0 }},
		{"relative kernel", func(s *hypervisor.DomainSpec) { s.Kernel = "vmlinux" }},
		{"other installation", func(s *hypervisor.DomainSpec) { s.InstallationID = "someone-else" }},
		{"bad type", func(s *hypervisor.DomainSpec) { s.Type = "xen" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := NewID("conf-")
			spec := c.opts.Spec(id, "tenant-a")
			tt.edit(&spec)
			if _, err := c.h.Create(ctx, spec); !errors.Is(err, hypervisor.ErrInvalid) {
				t.Errorf("Create(%s) error = %v; want ErrInvalid", tt.name, err)
			}
			if _, err := c.h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
				t.Errorf("Lookup(%s) after invalid Create error = %v; want ErrNotFound", id, err)
			}
		})
	}
}

func (c *conformance) capacity(t *testing.T) {
	ctx := ctxFor(t)
	before, err := c.h.Capacity(ctx)
	if err != nil {
		t.Fatalf("Capacity() error = %v", err)
	}
	if before.CPUs < 1 || before.MemoryTotalKiB == 0 || before.MemoryFreeKiB > before.MemoryTotalKiB {
		t.Errorf("Capacity() = %+v; want CPUs >= 1 and 0 < free <= total memory", before)
	}
	id := NewID("conf-")
	spec := c.opts.Spec(id, "tenant-a")
	c.create(t, c.h, id, "tenant-a")
	after, err := c.h.Capacity(ctx)
	if err != nil {
		t.Fatalf("Capacity() error = %v", err)
	}
	if after.Domains != before.Domains+1 || after.DomainVCPUs != before.DomainVCPUs+spec.VCPUs ||
		after.DomainMemoryKiB != before.DomainMemoryKiB+uint64(spec.MemoryMiB)*1024 {
		t.Errorf("Capacity() after one Create = %+v; want one more domain (%d vCPU, %d MiB) than %+v",
			after, spec.VCPUs, spec.MemoryMiB, before)
	}
}

// cpuTime: a running domain reports the CPU time it consumed (the host's
// own measure, which metering holds guest figures against), and it never
// goes down, in Lookup or List.
func (c *conformance) cpuTime(t *testing.T) {
	ctx := ctxFor(t)
	id := NewID("conf-")
	c.create(t, c.h, id, "tenant-a")
	first, err := c.h.Lookup(ctx, id)
	if err != nil {
		t.Fatalf("Lookup(%s) error = %v", id, err)
	}
	if first.CPUTime <= 0 {
		t.Errorf("Got(Lookup(%s).CPUTime) = %v; want > 0 for a running domain", id, first.CPUTime)
	}
	last := first.CPUTime
	for i := range 3 {
		list, err := c.h.List(ctx)
		if err != nil {
			t.Fatalf("List() error = %v", err)
		}
		for _, d := range list {
			if d.ID == id {
				if d.CPUTime < last {
					t.Errorf("Got(List() #%d CPUTime of %s) = %v; want >= %v (never down)", i, id, d.CPUTime, last)
				}
				last = d.CPUTime
			}
		}
		info, err := c.h.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("Lookup(%s) error = %v", id, err)
		}
		if info.CPUTime < last {
			t.Errorf("Got(Lookup(%s) #%d CPUTime) = %v; want >= %v (never down)", id, i, info.CPUTime, last)
		}
		last = info.CPUTime
	}
}

func (c *conformance) otherInstallations(t *testing.T) {
	if c.opts.Other == nil {
		t.Skip("backend offers no second installation")
	}
	ctx := ctxFor(t)
	other := c.opts.Other(t)
	if other.InstallationID() == c.h.InstallationID() {
		t.Fatalf("Other() installation %q is ours", other.InstallationID())
	}
	running := NewID("foreign-")
	c.create(t, other, running, "tenant-x")

	untouchable := []string{running}
	var defined []string
	if c.opts.DefineRaw != nil {
		bare, foreign := NewID("bare-"), NewID("foreign-def-")
		c.opts.DefineRaw(t, bareXML(hypervisor.DomainName(bare)))
		spec := c.opts.Spec(foreign, "tenant-x")
		spec.InstallationID = other.InstallationID()
		spec.Type = hypervisor.TypeQEMU
		def, err := hypervisor.BuildDomain(spec)
		if err != nil {
			t.Fatalf("BuildDomain(foreign) error = %v", err)
		}
		xml, err := def.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c.opts.DefineRaw(t, xml)
		untouchable = append(untouchable, bare, foreign)
		defined = append(defined, foreign)
	}

	list, err := c.h.List(ctx)
	if err != nil {
		t.Fatalf("List() error = %v", err)
	}
	for _, id := range untouchable {
		if slices.Contains(ids(list), id) {
			t.Errorf("List() = %v; want no %s (not ours)", ids(list), id)
		}
		if _, err := c.h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("Lookup(%s) error = %v; want ErrNotFound", id, err)
		}
		if err := c.h.Shutdown(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("Shutdown(%s) error = %v; want ErrNotFound", id, err)
		}
		if err := c.h.Destroy(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
			t.Errorf("Destroy(%s) error = %v; want ErrNotFound", id, err)
		}
	}
	if c.opts.Exists != nil {
		for _, id := range untouchable[1:] {
			if !c.opts.Exists(t, hypervisor.DomainName(id)) {
				t.Errorf("%s is gone after our Destroy attempt; want it left alone", hypervisor.DomainName(id))
			}
		}
	}
	foreign, err := c.h.ListForeign(ctx)
	if err != nil {
		t.Fatalf("ListForeign() error = %v", err)
	}
	for _, id := range append([]string{running}, defined...) {
		if !slices.Contains(ids(foreign), id) {
			t.Errorf("ListForeign() = %v; want it to contain %s", ids(foreign), id)
		}
	}
	// Still there, untouched, for its owner.
	if info, err := other.Lookup(ctx, running); err != nil || info.State != hypervisor.StateRunning {
		t.Errorf("other.Lookup(%s) after our attempts = %+v, %v; want running", running, info, err)
	}
	if list, err := other.List(ctx); err != nil || !slices.Contains(ids(list), running) {
		t.Errorf("other.List() = %v, %v; want %s", ids(list), err, running)
	}

	// Its events reach its owner, not us.
	if err := other.Destroy(ctx, running); err != nil {
		t.Fatalf("other.Destroy(%s) error = %v", running, err)
	}
	waitEvent(t, other, running, c.opts.EventTimeout, func(ev hypervisor.Event) bool {
		return ev.Kind == hypervisor.KindStopped
	})
	// A marker VM of ours: once its start event arrives, any event of the
	// foreign VM (sent earlier) would have been seen.
	marker := NewID("conf-")
	c.create(t, c.h, marker, "tenant-a")
	deadline := time.After(c.opts.EventTimeout)
	for {
		select {
		case ev := <-c.h.Events():
			if slices.Contains(untouchable, ev.ID) {
				t.Errorf("Events() delivered %+v of another installation", ev)
			}
			if ev.ID == marker && ev.Kind == hypervisor.KindStarted {
				return
			}
		case <-deadline:
			t.Fatalf("no start event for %s within %s", marker, c.opts.EventTimeout)
		}
	}
}

func (c *conformance) shutdown(t *testing.T) {
	ctx := ctxFor(t)
	id := NewID("conf-")
	c.create(t, c.h, id, "tenant-a")
	if c.opts.Ready != nil {
		c.opts.Ready(t, c.h, id)
	}
	if err := c.h.Shutdown(ctx, id); err != nil {
		t.Fatalf("Shutdown(%s) error = %v; want nil", id, err)
	}
	ev := waitEvent(t, c.h, id, c.opts.ShutdownTimeout, func(ev hypervisor.Event) bool {
		return ev.Kind == hypervisor.KindStopped || ev.Kind == hypervisor.KindCrashed
	})
	if ev.Kind != hypervisor.KindStopped || ev.Reason != "shutdown" {
		t.Errorf("event after Shutdown = %+v; want stopped, reason shutdown", ev)
	}
	// Transient: once stopped, nothing of it remains.
	if _, err := c.h.Lookup(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("Lookup(%s) after shutdown error = %v; want ErrNotFound", id, err)
	}
	if err := c.h.Shutdown(ctx, id); !errors.Is(err, hypervisor.ErrNotFound) {
		t.Errorf("Shutdown(%s) after shutdown error = %v; want ErrNotFound", id, err)
	}
}

// bareXML is a domain with our name prefix but no metadata, as a person
// running virsh by hand might make one.
func bareXML(name string) string {
	return `<domain type='qemu'><name>` + name + `</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>` +
		`<os><type arch='x86_64'>hvm</type></os></domain>`
}
