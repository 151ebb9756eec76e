package sandbox

import (
	"context"
	"fmt"
	"sort"

	"github.com/stockade-dev/stockade/sandbox/vmpool"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// admit refuses, before anything is written, a sandbox the tenant's VM pool
// cannot hold: its running and booting VMs with the sandboxes placed on
// them, plus the VMs the pool and the tenant quota still allow, must have
// room for every sandbox being created and this one too. A burst of creates
// beyond capacity then gets 429s that leave no sandbox row, no failed
// sandbox and no audit event behind. Call it under the tenant's admission
// lock, up to the record's write, so concurrent creates count each other.
// (Placement still boots, packs and may fail later for what this cannot
// foresee: a host out of memory, a VM lost meanwhile.)
func (s *Service) admit(ctx context.Context, pool vmpool.Pool, sb Sandbox) error {
	sts, err := s.vms.List(ctx, sb.TenantID)
	if err != nil {
		return err
	}
	// One read: a sandbox placed between two reads would be counted in
	// neither the VMs' loads nor the waiting ones.
	held, err := s.store.activeSandboxes(ctx, sb.TenantID)
	if err != nil {
		return err
	}
	load := map[string]vmLoad{}
	var waiting []Sandbox
	for _, h := range held {
		if h.VMID == "" {
			waiting = append(waiting, h)
			continue
		}
		l := load[h.VMID]
		l.VMID, l.Sandboxes, l.VCPUs, l.MemoryMiB = h.VMID, l.Sandboxes+1, l.VCPUs+h.VCPUs, l.MemoryMiB+h.MemoryMiB
		load[h.VMID] = l
	}
	quota, err := s.vms.Quota(ctx, sb.TenantID)
	if err != nil {
		return err
	}
	type bin struct {
		vm   vmpool.VM
		load vmLoad
	}
	var (
		bins   []*bin
		active tenants.Usage // VMs held against the pool and the quota
	)
	for _, st := range sts {
		vm := st.VM
		if !vm.State.Active() {
			continue
		}
		active.VMs++
		active.VCPUs += vm.VCPUs
		active.MemoryMiB += vm.MemoryMiB
		if vm.State == vmpool.StateRunning || vm.State == vmpool.StateBooting {
			bins = append(bins, &bin{vm: vm, load: load[vm.ID]})
		}
	}
	// VMs the pool may still boot, within its own limit and the quota.
	for n := active; n.VMs < pool.MaxVMs; {
		n.VMs++
		n.VCPUs += pool.VCPUs
		n.MemoryMiB += pool.MemoryMiB
		if quota.Check(n) != nil {
			break
		}
		bins = append(bins, &bin{vm: vmpool.VM{VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB}})
	}
	// Fullest first, as placement packs them.
	sort.SliceStable(bins, func(i, j int) bool { return bins[i].load.Sandboxes > bins[j].load.Sandboxes })
	fit := func(x Sandbox) bool {
		for _, b := range bins {
			if s.fits(b.vm, b.load, x) {
				b.load.Sandboxes++
				b.load.VCPUs += x.VCPUs
				b.load.MemoryMiB += x.MemoryMiB
				return true
			}
		}
		return false
	}
	for _, w := range waiting {
		fit(w)
	}
	if fit(sb) {
		return nil
	}
	return &errdefs.QuotaError{Quota: vmpool.QuotaPoolMaxVMs, Limit: pool.MaxVMs, Want: pool.MaxVMs + 1,
		Detail: fmt.Sprintf("the tenant's VM pool is full: its %d VM(s) of %d MiB (at most %d, within the quota) hold %d sandbox(es) running or being created, "+
			"with no room for %d MiB more; destroy sandboxes, or raise the pool's max VMs", len(bins), pool.MemoryMiB, pool.MaxVMs,
			len(waiting)+sumSandboxes(load), sb.MemoryMiB)}
}

func sumSandboxes(load map[string]vmLoad) int {
	n := 0
	for _, l := range load {
		n += l.Sandboxes
	}
	return n
}
