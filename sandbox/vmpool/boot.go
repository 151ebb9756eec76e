package vmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// runtime is what this process holds for one active VM: its agent session
// and the boot or adoption under way.
type runtime struct {
	id, tenantID string

	mu         sync.Mutex
	client     *agentproto.Client
	cancel     context.CancelCauseFunc // of the task under way
	done       chan struct{}           // closed when that task ends
	destroying bool                    // Destroy or recycle owns the VM's end
	stopActor  *audit.Actor            // who asked for a graceful stop
	nextRedial time.Time
	// disks serializes hot-plug changes to the VM (attach.go).
	disks sync.Mutex
}

// runtimeFor returns the VM's runtime, making it when there is none.
func (s *Service) runtimeFor(vm VM) *runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt := s.vms[vm.ID]
	if rt == nil {
		rt = &runtime{id: vm.ID, tenantID: vm.TenantID}
		s.vms[vm.ID] = rt
	}
	return rt
}

func (s *Service) lookupRuntime(id string) *runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vms[id]
}

// dropRuntime forgets an ended VM and closes its agent session.
func (s *Service) dropRuntime(id string) {
	s.mu.Lock()
	rt := s.vms[id]
	delete(s.vms, id)
	s.mu.Unlock()
	if rt != nil {
		rt.closeClient()
	}
	s.releaseLease(id)
	s.removeScratch(id)
}

func (rt *runtime) getClient() *agentproto.Client {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.client
}

// setClient installs a fresh agent session, closing any previous one.
func (rt *runtime) setClient(c *agentproto.Client) {
	rt.mu.Lock()
	old := rt.client
	rt.client = c
	rt.mu.Unlock()
	if old != nil && old != c {
		old.Close()
	}
}

func (rt *runtime) closeClient() {
	rt.mu.Lock()
	c := rt.client
	rt.client = nil
	rt.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// clientGone clears the session if it is still c.
func (rt *runtime) clientGone(c *agentproto.Client) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.client != c {
		return false
	}
	rt.client = nil
	return true
}

func (rt *runtime) setDestroying(v bool) {
	rt.mu.Lock()
	rt.destroying = v
	rt.mu.Unlock()
}

func (rt *runtime) isDestroying() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.destroying
}

// busy reports whether a boot or adoption is under way.
func (rt *runtime) busy() bool {
	rt.mu.Lock()
	done := rt.done
	rt.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// stopTask cancels the task under way with cause and waits for it to end.
func (rt *runtime) stopTask(cause error, wait time.Duration) {
	rt.mu.Lock()
	cancel, done := rt.cancel, rt.done
	rt.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel(cause)
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// startTask runs fn for the VM in the background under a context that
// stopTask (or Close) cancels. It returns false when a task is already
// under way.
func (s *Service) startTask(rt *runtime, fn func(ctx context.Context)) bool {
	rt.mu.Lock()
	if rt.done != nil {
		select {
		case <-rt.done:
		default:
			rt.mu.Unlock()
			return false
		}
	}
	bctx, unbind := s.stop.Bound(context.Background())
	ctx, cancel := context.WithCancelCause(bctx)
	done := make(chan struct{})
	rt.cancel, rt.done = cancel, done
	rt.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		defer unbind()
		defer cancel(nil)
		fn(ctx)
	}()
	return true
}

// startBoot boots a VM recorded by Store.CreateVM, in the background.
func (s *Service) startBoot(vm VM, guest image.Guest) {
	rt := s.runtimeFor(vm)
	h := s.hostByURI(vm.HostURI)
	if h != nil {
		h.reserve(vm.MemoryMiB)
	}
	s.startTask(rt, func(ctx context.Context) {
		if h != nil {
			defer h.reserve(-vm.MemoryMiB)
		}
		s.boot(ctx, rt, vm, guest)
	})
}

// boot defines and starts the domain, opens its agent channel and does the
// handshake, recording each phase. On failure the domain is destroyed and
// the VM recorded failed. When the service closes mid-boot the domain is
// left for the next Start to adopt.
func (s *Service) boot(ctx context.Context, rt *runtime, vm VM, guest image.Guest) {
	select {
	case s.bootSlots <- struct{}{}:
		defer func() { <-s.bootSlots }()
	case <-ctx.Done():
		s.bootCancelled(ctx, vm, nil)
		return
	}
	_, hv, err := s.liveHost(vm.HostURI)
	if err != nil {
		s.failBoot(vm, nil, fmt.Errorf("boot: %w", err))
		return
	}
	s.phase(vm.ID, PhaseDefining)
	files, err := s.HostFiles(ctx, vm.HostURI, guest)
	if err != nil {
		if ctx.Err() != nil {
			s.bootCancelled(ctx, vm, nil)
			return
		}
		s.failBoot(vm, nil, fmt.Errorf("boot: %w", err))
		return
	}
	scratch, err := s.createScratch(ctx, vm, len(files.Templates))
	if err != nil {
		s.failBoot(vm, nil, fmt.Errorf("boot: %w", err))
		return
	}
	spec := hypervisor.DomainSpec{
		ID: vm.ID, TenantID: vm.TenantID, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB,
		Kernel: files.Kernel, Initramfs: files.Initramfs, Cmdline: guest.Cmdline,
		ChannelName: agentproto.ChannelName, Disks: append(files.Templates, scratch),
	}
	start := time.Now()
	dom, err := hv.Create(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			s.bootCancelled(ctx, vm, nil)
			return
		}
		s.failBoot(vm, nil, fmt.Errorf("define: %w", err))
		return
	}
	if ctx.Err() != nil {
		s.bootCancelled(ctx, vm, hv)
		return
	}
	s.phase(vm.ID, PhaseBooting)
	client, err := s.handshake(ctx, hv, vm, s.cfg.BootTimeout, func() { s.phase(vm.ID, PhaseHandshake) })
	if err != nil {
		if ctx.Err() != nil {
			s.bootCancelled(ctx, vm, hv)
			return
		}
		s.failBoot(vm, hv, fmt.Errorf("agent handshake: %w", err))
		return
	}
	took := time.Since(start)
	hello := client.Hello()
	// Booted or restored, its own identity before any tenant work (identity.go).
	if err := s.setIdentity(ctx, client, vm); err != nil {
		client.Close()
		if ctx.Err() != nil {
			s.bootCancelled(ctx, vm, hv)
			return
		}
		s.failBoot(vm, hv, err)
		return
	}
	// Not the task's ctx: a destroy cancels that; only Close cuts this short.
	mctx, cancel := s.stop.Bound(context.Background())
	ok, err := s.store.markRunning(mctx, vm.ID, ready{AgentVersion: hello.Agent, KernelVersion: hello.Kernel, DomainUUID: dom.UUID, Boot: took})
	cancel()
	if err != nil || !ok {
		// Destroyed or lost meanwhile: whoever did that records the end.
		client.Close()
		if err != nil && s.stop.Err() == nil {
			s.log.Error("record vm running", "vm", vm.ID, "err", err)
		}
		return
	}
	rt.setClient(client)
	s.watchAgent(rt, client)
	s.agentReady(vm, client)
	s.clearBackoff(vm.TenantID)
	s.log.Info("vm running", "vm", vm.ID, "tenant", vm.TenantID, "host", vm.HostURI, "boot", took.Round(time.Millisecond),
		"agent", hello.Agent, "kernel", hello.Kernel)
}

// bootCancelled handles a boot whose context ended: a destroy or a lost VM
// (their owners record the end; the domain must go), or Close (the domain,
// if any, is left for the next Start to adopt).
func (s *Service) bootCancelled(ctx context.Context, vm VM, hv Hypervisor) {
	cause := context.Cause(ctx)
	if s.stop.Err() != nil {
		return
	}
	if hv != nil && (errors.Is(cause, errDestroyed) || errors.Is(cause, errLost)) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := hv.Destroy(dctx, vm.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			s.log.Warn("destroy cancelled boot", "vm", vm.ID, "err", err)
		}
	}
}

// failBoot destroys what a failed boot made and records the VM failed.
func (s *Service) failBoot(vm VM, hv Hypervisor, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if hv != nil {
		if err := hv.Destroy(ctx, vm.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			s.log.Error("destroy failed vm", "vm", vm.ID, "err", err)
		}
	}
	reason := truncate(cause.Error(), 500)
	_, changed, err := s.store.end(ctx, vm.ID, []State{StateBooting}, StateFailed, reason,
		eventPtr(SystemActor().Event(vm.TenantID, audit.TypeVMFailed, "vm", vm.ID, map[string]any{"reason": reason, "host": vm.HostURI})))
	if err != nil {
		s.log.Error("record failed vm", "vm", vm.ID, "err", err)
	}
	if changed {
		s.log.Warn("vm failed to boot", "vm", vm.ID, "tenant", vm.TenantID, "err", cause)
		s.noteBootFailure(vm.TenantID)
	}
	s.dropRuntime(vm.ID)
}

func (s *Service) phase(id string, p Phase) {
	if err := s.store.setPhase(context.Background(), id, p); err != nil {
		s.log.Warn("record boot phase", "vm", id, "phase", p, "err", err)
	}
}

// handshake opens the VM's agent channel through libvirt and says hello.
// onFirstByte runs when the agent first answers.
func (s *Service) handshake(ctx context.Context, hv Hypervisor, vm VM, timeout time.Duration, onFirstByte func()) (*agentproto.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ch, err := hv.OpenChannel(ctx, vm.ID, agentproto.ChannelName)
	if err != nil {
		return nil, err
	}
	var conn io.ReadWriteCloser = ch
	if onFirstByte != nil {
		conn = &firstRead{ReadWriteCloser: ch, fn: onFirstByte}
	}
	c, err := agentproto.Dial(ctx, conn, s.agentOptions(vm))
	if err != nil {
		return nil, err // Dial closed the channel
	}
	return c, nil
}

// firstRead calls fn once, when the first bytes arrive.
type firstRead struct {
	io.ReadWriteCloser
	once sync.Once
	fn   func()
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.ReadWriteCloser.Read(p)
	if n > 0 {
		f.once.Do(f.fn)
	}
	return n, err
}

// SetWriteDeadline passes through to the channel: the agent link uses it
// to tell the agent the session is over when it closes.
func (f *firstRead) SetWriteDeadline(t time.Time) error {
	if d, ok := f.ReadWriteCloser.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return fmt.Errorf("channel write deadline: %w", errors.ErrUnsupported)
}

// watchAgent clears the VM's session when it ends without us closing it, so
// the monitor can open a new one if the VM still runs.
func (s *Service) watchAgent(rt *runtime, c *agentproto.Client) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-s.stop.Done():
		case <-c.Done():
			if rt.clientGone(c) {
				s.log.Info("agent session ended", "vm", rt.id)
			}
		}
	}()
}

// noteBootFailure delays the tenant's next warm boot, doubling up to 10 min,
// so a broken image does not boot-loop.
func (s *Service) noteBootFailure(tenantID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.backoff[tenantID]
	b.failures++
	d := time.Duration(1<<min(b.failures, 6)) * 10 * time.Second
	b.until = s.cfg.Clock.Now().Add(min(d, 10*time.Minute))
	s.backoff[tenantID] = b
}

func (s *Service) backedOff(tenantID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Clock.Now().Before(s.backoff[tenantID].until)
}

func (s *Service) clearBackoff(tenantID string) {
	s.mu.Lock()
	delete(s.backoff, tenantID)
	s.mu.Unlock()
}
