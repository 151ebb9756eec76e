package vmpool

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

const (
	hostA = "qemu+tcp://127.0.0.1:1/system"
	hostB = "qemu+tcp://127.0.0.1:2/system"
)

// twoHosts records two hosts of memMiB each, labelled as given.
func (e *storeEnv) twoHosts(t *testing.T, memMiB int, labelsA, labelsB string) {
	t.Helper()
	for _, h := range []struct{ uri, labels string }{{hostA, labelsA}, {hostB, labelsB}} {
		l, err := ParseLabels("labels", h.labels)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.AddHost(bg, admin, Host{URI: h.uri, Labels: l, CPUs: 8, MemoryKiB: uint64(memMiB) * 1024}); err != nil {
			t.Fatalf("addHost(%s) = %v", h.uri, err)
		}
	}
}

func (e *storeEnv) bigTenant(t *testing.T, slug string, maxVMs int) string {
	t.Helper()
	tn := e.tenant(t, slug)
	q := tenants.DefaultQuota()
	q.MaxVMs, q.MaxVCPUs, q.MaxMemoryMiB = 100, 100, 1<<20
	if _, err := e.tenants.SetQuota(bg, admin, tn, q); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SetPool(bg, admin, tn, PoolSettings{VCPUs: 1, MemoryMiB: 1024, MaxVMs: maxVMs}); err != nil {
		t.Fatal(err)
	}
	return tn
}

func hostsOf(vms ...VM) map[string]int {
	out := map[string]int{}
	for _, vm := range vms {
		out[vm.HostURI]++
	}
	return out
}

// TestPlacement: the pick in CreateVM's transaction spreads a tenant's VMs,
// never uses a cordoned, draining, unanswering or full host, and honours the
// tenant's labels; a constraint no host satisfies is a clear error and
// nothing is written.
func TestPlacement(t *testing.T) {
	live := []string{hostA, hostB}
	eachDB(t, func(t *testing.T, e *storeEnv) {
		e.twoHosts(t, 4096, "zone=a", "zone=b,dedicated=acme")
		tn := e.bigTenant(t, "spread", 20)
		other := e.bigTenant(t, "other", 20)

		// Spread: four VMs, two on each host, whatever the other tenant has.
		if _, err := e.store.CreateVM(bg, admin, other, NewVM{HostURI: hostA}); err != nil {
			t.Fatal(err)
		}
		var mine []VM
		for i := 0; i < 2; i++ {
			vm, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
			if err != nil {
				t.Fatalf("CreateVM #%d = %v", i, err)
			}
			mine = append(mine, vm)
		}
		if got := hostsOf(mine...); got[hostA] != 1 || got[hostB] != 1 {
			t.Errorf("Got(hosts of 2 vms) = %v; want one on each", got)
		}

		// Full: host A has 4096 MiB, 2 VMs committed there; B 1.
		for i := 0; i < 3; i++ {
			vm, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
			if err != nil {
				t.Fatalf("CreateVM fill #%d = %v", i, err)
			}
			mine = append(mine, vm)
		}
		// Fill up: 4 GiB a host, the other tenant's VM counts on A.
		all := append([]VM{}, mine...)
		for {
			vm, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
			if err != nil {
				if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "uncommitted") {
					t.Errorf("CreateVM on full hosts = %v; want ErrUnavailable naming the memory", err)
				}
				break
			}
			all = append(all, vm)
		}
		if got := hostsOf(all...); got[hostA] != 3 || got[hostB] != 4 {
			t.Errorf("Got(hosts when full) = %v; want A 3 (+1 of the other tenant), B 4", got)
		}
	})

	eachDB(t, func(t *testing.T, e *storeEnv) {
		e.twoHosts(t, 1<<20, "zone=a", "zone=b,dedicated=acme")
		tn := e.bigTenant(t, "states", 20)
		if _, err := e.store.setHostState(bg, admin, hostB, hostChange{to: HostCordoned, from: []HostState{HostActive}, event: audit.TypeHostCordoned}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			vm, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
			if err != nil || vm.HostURI != hostA {
				t.Fatalf("CreateVM with B cordoned = %s, %v; want on %s", vm.HostURI, err, hostA)
			}
		}
		// Not answering: A is not live.
		before := e.rows(t)
		_, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: []string{hostB}})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), hostB+" is cordoned") || !strings.Contains(err.Error(), hostA+" does not answer") {
			t.Errorf("CreateVM with A down and B cordoned = %v; want ErrUnavailable saying both", err)
		}
		e.unchanged(t, before, "a refused placement")

		// Labels: dedicated=acme only B has; B cordoned -> unavailable; B
		// active -> there.
		want, _ := ParseLabels("labels", "dedicated=acme")
		if _, err := e.store.SetHostConstraint(bg, admin, tn, want); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("CreateVM needing B while it is cordoned = %v; want ErrUnavailable", err)
		}
		if _, err := e.store.setHostState(bg, admin, hostB, hostChange{to: HostActive, from: []HostState{HostCordoned}, event: audit.TypeHostUncordoned}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			vm, err := e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
			if err != nil || vm.HostURI != hostB {
				t.Errorf("CreateVM with dedicated=acme = %s, %v; want on %s (even with more of the tenant's vms there)", vm.HostURI, err, hostB)
			}
		}
		// A constraint no host satisfies.
		none, _ := ParseLabels("labels", "dedicated=globex")
		if _, err := e.store.SetHostConstraint(bg, admin, tn, none); err != nil {
			t.Fatal(err)
		}
		before = e.rows(t)
		_, err = e.store.CreateVM(bg, admin, tn, NewVM{Live: live})
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "dedicated=globex") {
			t.Errorf("CreateVM with a constraint no host has = %v; want ErrConflict naming it", err)
		}
		e.unchanged(t, before, "a constraint no host satisfies")
	})
}

// TestConcurrentPlacementNeverOvercommits: 12 creates at once for 6 tenants
// on two hosts with room for 3 VMs each: exactly 6 succeed, 3 per host (the
// host rows are locked in the transaction: on PostgreSQL two replicas would
// race exactly so).
func TestConcurrentPlacementNeverOvercommits(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		e.twoHosts(t, 3*1024, "", "")
		var tns []string
		for _, slug := range []string{"race-a", "race-b", "race-c", "race-d", "race-e", "race-f"} {
			tns = append(tns, e.bigTenant(t, slug, 10))
		}
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			got []VM
		)
		for i := 0; i < 12; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				vm, err := e.store.CreateVM(bg, admin, tns[i%len(tns)], NewVM{Live: []string{hostA, hostB}})
				if err != nil {
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("CreateVM = %v; want nil or ErrUnavailable", err)
					}
					return
				}
				mu.Lock()
				got = append(got, vm)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if h := hostsOf(got...); len(got) != 6 || h[hostA] != 3 || h[hostB] != 3 {
			t.Errorf("Got(placed) = %d %v; want 6, 3 per host", len(got), h)
		}
	})
}

// TestHostStates: cordon/drain/uncordon/remove transitions, the last-host
// guard (unless forced), remove only when empty, a duplicate add refused;
// each refusal writes nothing, each change is audited.
func TestHostStates(t *testing.T) {
	eachDB(t, func(t *testing.T, e *storeEnv) {
		e.twoHosts(t, 8192, "", "")
		// test:///host of eachDB is active too: cordon it out of the way.
		cordon := hostChange{to: HostCordoned, from: []HostState{HostActive, HostDraining}, event: audit.TypeHostCordoned,
			check: func(tx *gorm.DB, h Host) error { return activeHostsLeft(tx, h, false) }}
		drain := hostChange{to: HostDraining, from: []HostState{HostActive, HostCordoned}, event: audit.TypeHostDrained,
			check: func(tx *gorm.DB, h Host) error { return activeHostsLeft(tx, h, false) }}
		if _, err := e.store.setHostState(bg, admin, "test:///host", cordon); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.setHostState(bg, admin, hostA, drain); err != nil {
			t.Fatalf("drain A = %v", err)
		}
		before := e.rows(t)
		_, err := e.store.setHostState(bg, admin, hostB, drain)
		if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "last active host") {
			t.Errorf("drain the last active host = %v; want ErrConflict saying so", err)
		}
		if _, err := e.store.setHostState(bg, admin, hostB, cordon); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("cordon the last active host = %v; want ErrConflict", err)
		}
		e.unchanged(t, before, "refused last-host changes")
		if h, _ := e.store.host(bg, hostB); h.State != HostActive {
			t.Errorf("Got(B state) = %s; want active", h.State)
		}
		forced := drain
		forced.check = func(tx *gorm.DB, h Host) error { return activeHostsLeft(tx, h, true) }
		if _, err := e.store.setHostState(bg, admin, hostB, forced); err != nil {
			t.Errorf("forced drain of the last host = %v", err)
		}

		tn := e.bigTenant(t, "remove", 5)
		if _, err := e.store.CreateVM(bg, admin, tn, NewVM{HostURI: hostA}); err != nil {
			t.Fatal(err)
		}
		remove := hostChange{to: HostRemoved, from: []HostState{HostActive, HostCordoned, HostDraining}, event: audit.TypeHostRemoved, check: noActiveVMs}
		before = e.rows(t)
		if _, err := e.store.setHostState(bg, admin, hostA, remove); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "still runs 1 vm") {
			t.Errorf("remove a host with a vm = %v; want ErrConflict", err)
		}
		e.unchanged(t, before, "a refused remove")
		if _, err := e.store.setHostState(bg, admin, hostB, remove); err != nil {
			t.Errorf("remove an empty host = %v", err)
		}
		before = e.rows(t)
		if _, err := e.store.AddHost(bg, admin, Host{URI: hostA}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("add a duplicate host = %v; want ErrConflict", err)
		}
		e.unchanged(t, before, "a refused duplicate host")
		if h, err := e.store.AddHost(bg, admin, Host{URI: hostB, MemoryKiB: 1 << 20}); err != nil || h.State != HostActive {
			t.Errorf("add a removed host back = %+v, %v; want active", h, err)
		}
		want := map[string]int{audit.TypeHostAdded: 3, audit.TypeHostDrained: 2, audit.TypeHostCordoned: 1, audit.TypeHostRemoved: 1}
		for typ, n := range want {
			if got := len(e.events(t, "", typ)); got != n {
				t.Errorf("Got(%s events) = %d; want %d", typ, got, n)
			}
		}
	})
}

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		in, want, rule string
	}{
		{"", "", ""},
		{"zone=a, dedicated=acme", "dedicated=acme,zone=a", ""},
		{"zone", "", "label_format"},
		{"Zone=a", "", "label_key"},
		{"zone=", "", "label_value"},
		{"zone=a zone=b", "", "label_repeated"},
		{"zone=a;rm -rf", "", "label_value"},
	} {
		l, err := ParseLabels("labels", tc.in)
		var fe *errdefs.FieldError
		switch {
		case tc.rule == "" && (err != nil || l.String() != tc.want):
			t.Errorf("ParseLabels(%q) = %q, %v; want %q", tc.in, l.String(), err, tc.want)
		case tc.rule != "" && (!errors.As(err, &fe) || fe.Rule != tc.rule || fe.Field != "labels"):
			t.Errorf("ParseLabels(%q) = %v; want a labels field error %s", tc.in, err, tc.rule)
		}
	}
}
