package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// meterLoop samples every running sandbox's cgroup into the usage ledger
// every SampleInterval until Close, and prunes old raw samples hourly.
// Samples are cumulative and the ledger moves with the meter in one
// transaction, so a restart (or a second replica sampling too) neither loses
// usage nor counts it twice; a sandbox's last interval is accounted when it
// ends, from its agent's final sample.
func (s *Service) meterLoop() {
	var pruned time.Time
	s.every(s.cfg.SampleInterval, max(s.cfg.SampleInterval*4, 30*time.Second), func(ctx context.Context) {
		if err := s.sampleAll(ctx); err != nil && s.stop.Err() == nil {
			s.log.Warn("sample sandbox usage", "err", err)
		}
		if now := s.cfg.Clock.Now(); now.Sub(pruned) > time.Hour {
			pruned = now
			if _, err := s.usage.PruneSamples(ctx, now.Add(-s.cfg.SampleRetention)); err != nil {
				s.log.Warn("prune usage samples", "err", err)
			}
		}
	})
}

// sampleAll takes one sample of every running sandbox, VM by VM.
func (s *Service) sampleAll(ctx context.Context) error {
	sbs, err := s.store.active(ctx)
	if err != nil {
		return err
	}
	byVM := map[vmKey][]Sandbox{}
	for _, sb := range sbs {
		if sb.State == StateRunning && sb.VMID != "" {
			k := vmKey{sb.TenantID, sb.VMID}
			byVM[k] = append(byVM[k], sb)
		}
	}
	// VMs are sampled in parallel (a few at a time); a VM's sandboxes one
	// after another over its one agent session.
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for k, group := range byVM {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// A VM's sandboxes within one deadline: a guest that does not
			// answer holds its slot that long, not per sandbox it has.
			ctx, cancel := context.WithTimeout(ctx, max(s.cfg.SampleInterval, 10*time.Second))
			defer cancel()
			c, err := s.vms.Agent(ctx, k.tenant, k.vm)
			if err != nil {
				return // its session is being re-opened: next time
			}
			vm := vmReading{share: vcpuShares(group)}
			if cpu, err := s.vms.CPUTime(ctx, k.tenant, k.vm); err == nil {
				vm.cpuNS = cpu.Nanoseconds()
			} else {
				s.log.Debug("vm cpu time", "vm", k.vm, "err", err)
			}
			for _, sb := range group {
				s.sampleOne(ctx, c, sb, vm)
			}
		}()
	}
	wg.Wait()
	return nil
}

// vmReading is what libvirt said of a VM at a sampling pass: its CPU time
// (0: unknown) and each of its sandboxes' share of it.
type vmReading struct {
	cpuNS int64
	share map[string]float64
}

// vcpuShares splits a VM among its running sandboxes by their vCPUs.
func vcpuShares(group []Sandbox) map[string]float64 {
	total := 0
	for _, sb := range group {
		total += max(sb.VCPUs, 1)
	}
	out := make(map[string]float64, len(group))
	for _, sb := range group {
		out[sb.ID] = float64(max(sb.VCPUs, 1)) / float64(total)
	}
	return out
}

// sampleOne accounts one sample of a running sandbox, with its VM's CPU
// time beside the guest's figures.
func (s *Service) sampleOne(ctx context.Context, c *agentproto.Client, sb Sandbox, vm vmReading) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := c.SandboxStats(sctx, sb.ID)
	cancel()
	if err != nil || st.State != agentproto.SandboxRunning {
		// Gone or stopped: its end (and final sample) is the sync loop's.
		return
	}
	sample := sampleOf(&st, s.store.now())
	sample.VMCPUNS, sample.VMShare = vm.cpuNS, vm.share[sb.ID]
	_, err = s.usage.Observe(ctx, sb.ID, sample, nil)
	if errors.Is(err, usage.ErrNoMeter) && sb.StartedAt != nil {
		// Started by a version that did not meter: meter it from its start.
		err = s.store.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := usage.Open(tx, meterOf(sb, *sb.StartedAt)); err != nil {
				return err
			}
			_, err := usage.Observe(tx, sb.ID, sample, nil)
			return err
		})
	}
	if err != nil {
		s.log.Warn("account usage sample", "sandbox", sb.ID, "err", err)
	}
}
