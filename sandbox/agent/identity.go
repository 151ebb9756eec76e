package agent

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// A VM restored from a memory snapshot wakes with the snapshot's kernel RNG
// state and the wall clock of the moment it was saved: every VM restored
// from one snapshot would draw the same "random" numbers and stamp files
// with a stale time. vm.identity (OpVMIdentity) gives each life of a VM its
// own: the host's seed goes into the kernel's pool, credited, and the CRNG
// is reseeded at once (RNDRESEEDCRNG; otherwise the per-CPU CRNGs would keep
// serving the old key until the next scheduled reseed, up to a minute
// later); CLOCK_REALTIME is set to the host's clock. The host sends it after
// every handshake of a booted or restored VM, before any tenant work.
//
// What else could be shared between restored VMs, and why it is not:
//   - the kernel's boot_id is made on its first read: nothing in the guest
//     reads it before this op (the agent only here, after the reseed), so a
//     restored VM makes its own;
//   - crypto/rand reads getrandom(2) on every call (no user-space state in
//     Go without FIPS mode, and FIPS mode mixes fresh getrandom output into
//     every read): it follows the reseed;
//   - the agent keeps no random token of its own: sessions are counted, the
//     channel's link session id is the host's (a fresh one per dial), and
//     the sandbox init's temporary names draw crypto/rand when used;
//   - the Go runtime's own generator (map hash seeds, select order,
//     math/rand's global source) is seeded at process start and cannot be
//     reseeded; nothing in the agent draws from it for anything that must
//     be unpredictable (the agent imports no math/rand), and every process a
//     sandbox starts is a new exec with its own AT_RANDOM from the reseeded
//     kernel.

// maxGeneration bounds the generation the agent keeps (a VM id).
const maxGeneration = 128

// KernelControl changes what vm.identity changes in the guest kernel. Only
// the VM's init owns the machine's RNG and clock: NewServer gives PID 1 the
// real ones (RealKernel); any other server offers vm.identity only when its
// Config names a KernelControl (tests), so an agent run on a host never
// steps the host's clock.
type KernelControl struct {
	// Reseed mixes seed into the kernel's pool, credited, and reseeds the
	// CRNG before returning.
	Reseed func(seed []byte) error
	// SetClock sets CLOCK_REALTIME.
	SetClock func(time.Time) error
}

// RealKernel is the running kernel's RNG (/dev/random) and CLOCK_REALTIME.
func RealKernel() *KernelControl {
	return &KernelControl{
		Reseed:   func(seed []byte) error { return ReseedRandom("/dev/random", seed) },
		SetClock: SetRealtime,
	}
}

// ReseedRandom writes seed into the kernel's input pool through the random
// device at path with RNDADDENTROPY, crediting every bit (the host drew it
// from its own CSPRNG), then forces the CRNG to reseed from the pool
// (RNDRESEEDCRNG). Both need CAP_SYS_ADMIN.
func ReseedRandom(path string, seed []byte) error {
	if len(seed) == 0 {
		return fmt.Errorf("reseed kernel rng: empty seed: %w", agentproto.ErrBadRequest)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reseed kernel rng: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(seed)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	raw, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("reseed kernel rng: %w", err)
	}
	var ioerr error
	if err := raw.Control(func(fd uintptr) {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
			ioerr = fmt.Errorf("RNDADDENTROPY: %w", e)
			return
		}
		if err := unix.IoctlSetInt(int(fd), unix.RNDRESEEDCRNG, 0); err != nil {
			ioerr = fmt.Errorf("RNDRESEEDCRNG: %w", err)
		}
	}); err != nil {
		return fmt.Errorf("reseed kernel rng: %w", err)
	}
	clear(info)
	if ioerr != nil {
		return fmt.Errorf("reseed kernel rng: %w", ioerr)
	}
	return nil
}

// SetRealtime sets the kernel's CLOCK_REALTIME to t (CAP_SYS_TIME).
func SetRealtime(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("set clock: %w", err)
	}
	return nil
}

// identityState is what the agent keeps of the identities it was given.
type identityState struct {
	mu         sync.Mutex // serialises vm.identity: one reseed and clock step at a time
	generation string
}

func (i *identityState) current() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.generation
}

// checkIdentity bounds what the host sent.
func checkIdentity(req *agentproto.IdentityRequest) error {
	switch {
	case req == nil:
		return fmt.Errorf("vm.identity without its body: %w", agentproto.ErrBadRequest)
	case len(req.Seed) < agentproto.MinIdentitySeed || len(req.Seed) > agentproto.MaxIdentitySeed:
		return fmt.Errorf("vm.identity: seed of %d bytes, want %d to %d: %w",
			len(req.Seed), agentproto.MinIdentitySeed, agentproto.MaxIdentitySeed, agentproto.ErrBadRequest)
	case req.Now.Year() < 2000 || req.Now.Year() > 9999:
		return fmt.Errorf("vm.identity: now %s is not a wall clock: %w", req.Now.UTC().Format(time.RFC3339), agentproto.ErrBadRequest)
	case len(req.Generation) > maxGeneration:
		return fmt.Errorf("vm.identity: generation of %d bytes, at most %d: %w", len(req.Generation), maxGeneration, agentproto.ErrBadRequest)
	case strings.ContainsFunc(req.Generation, func(r rune) bool { return r <= ' ' || r > '~' }):
		return fmt.Errorf("vm.identity: generation %q has a character outside printable ASCII: %w", req.Generation, agentproto.ErrBadRequest)
	}
	return nil
}

// identify reseeds the kernel's RNG with the host's seed, sets the clock and
// reads the boot id (made now, after the reseed, if nothing read it yet).
func (s *Server) identify(req *agentproto.IdentityRequest) (agentproto.IdentityResult, error) {
	k := s.cfg.Kernel
	if k == nil {
		return agentproto.IdentityResult{}, fmt.Errorf("op %s: this agent does not own the machine's clock and rng: %w",
			agentproto.OpVMIdentity, agentproto.ErrNotImplemented)
	}
	if err := checkIdentity(req); err != nil {
		return agentproto.IdentityResult{}, err
	}
	s.ident.mu.Lock()
	defer s.ident.mu.Unlock()
	if err := k.Reseed(req.Seed); err != nil {
		return agentproto.IdentityResult{}, fmt.Errorf("vm identity: %w", err)
	}
	step := req.Now.Sub(time.Now())
	if err := k.SetClock(req.Now); err != nil {
		return agentproto.IdentityResult{}, fmt.Errorf("vm identity: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(s.cfg.ProcDir, "sys/kernel/random/boot_id"))
	if err != nil {
		return agentproto.IdentityResult{}, fmt.Errorf("vm identity: read boot id: %w", err)
	}
	prev := s.ident.generation
	s.ident.generation = req.Generation
	s.log.Info("vm identity", "generation", req.Generation, "previous", prev, "seed_bytes", len(req.Seed),
		"clock_step", step.Round(time.Millisecond))
	return agentproto.IdentityResult{Reseeded: true, ClockStepped: step, BootID: strings.TrimSpace(string(b))}, nil
}

// serveIdentity answers OpVMIdentity.
func (s *Server) serveIdentity(st net.Conn, req agentproto.Request) {
	res, err := s.identify(req.Identity)
	if err != nil {
		s.log.Warn("vm identity", "err", err)
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
		return
	}
	s.reply(st, agentproto.Response{Identity: &res})
}
