package vmpool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// VM memory snapshots (snapshot.go). With Config.Snapshots on, each host
// keeps, per VM shape (memory, vCPUs) and tenant (unless
// Config.SnapshotsShared), a memory snapshot of a booted,
// agent-ready guest of the current image, and boot restores VMs from it
// instead of cold booting (hypervisor.Restore: a new domain, its own name
// and UUID, the snapshot's devices). The snapshot VM boots with the
// template disks and a scratch disk of its own, and is made warm before
// the save: the AgentReady hook configures its pre-started sandboxes (no
// tenant's anything: no env, secret or workspace content) and the build
// waits until they run, so crun, the template disks and the scratch disk
// have been used once. Its scratch disk is saved with it (slot.scratch);
// a restored VM gets a copy of it as its own scratch disk at the same
// target, so the restored guest's mounted filesystem and its pre-started
// sandboxes' folders are there, and nothing of it is shared. The host does
// a fresh handshake and vm.identity (identity.go) with every restored VM
// before anything else: a claim of a pre-started sandbox comes after.
// Spares (spare.go) keep the copies a restore needs made ahead.
//
// The snapshot's key is everything the saved guest depends on: the image
// manifest (guest version, kernel, initramfs, command line, every
// template's name, version and path), memory, vCPUs, domain type, host,
// installation and tenant. A snapshot whose key differs from the current one (the
// image was rebuilt) is stale; one whose bytes do not hash to the sum
// recorded at build is corrupt; both fall back to a cold boot with the
// reason recorded on the VM and logged, and the snapshot is rebuilt in the
// background. A VM start never waits for a build.

// snapshotSettle is how long a snapshot VM idles after its handshake
// before it is saved.
const snapshotSettle = 4 * time.Second

// snapshotFormat is bumped when what a snapshot VM is changes.
const snapshotFormat = 2 // 2: the scratch disk and pre-started sandboxes are in it

// Boot kinds recorded on the VM (VM.BootKind).
const (
	BootRestored = "restored"
	BootCold     = "cold"
)

// Fallback reasons (the label of the fallback counter, the start of the
// cold boot's note).
const (
	FallbackOff      = "off"           // Config.Snapshots is off, or the driver has no snapshots
	FallbackNone     = "none"          // not built yet (a build starts)
	FallbackBuilding = "building"      // a build is under way
	FallbackStale    = "stale"         // built from another image or VM shape
	FallbackCorrupt  = "corrupt"       // bytes or header do not check
	FallbackFailed   = "restore_error" // libvirt refused it, or the VM did not answer
	FallbackBackoff  = "backoff"       // restores failed lately: cold boots for a while
)

// snapshotHV is what a Hypervisor needs for snapshots (*hypervisor.Host).
type snapshotHV interface {
	SaveSnapshot(ctx context.Context, id, path string) error
	Restore(ctx context.Context, spec hypervisor.DomainSpec, snap hypervisor.Snapshot) (*hypervisor.Domain, error)
	PrepareSnapshot(ctx context.Context, snap hypervisor.Snapshot, dst string) error
}

// snapshotKey is what a snapshot's guest depends on.
type snapshotKey struct {
	Format       int      `json:"format"`
	Installation string   `json:"installation"`
	Tenant       string   `json:"tenant,omitempty"` // "" when shared
	Host         string   `json:"host"`
	DomainType   string   `json:"domain_type"`
	MemoryMiB    int      `json:"memory_mib"`
	VCPUs        int      `json:"vcpus"`
	Guest        string   `json:"guest"` // version kernel initramfs cmdline
	Templates    []string `json:"templates"`
	// CPU is the domain's CPU and features elements as BuildDomain
	// writes them: a change of the guest's CPU model makes it stale.
	CPU string `json:"cpu,omitempty"`
}

func (k snapshotKey) sum() string {
	b, _ := json.Marshal(k)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// snapshotMeta is the sidecar written next to a snapshot file once it is
// complete.
type snapshotMeta struct {
	Key    string      `json:"key"`
	Inputs snapshotKey `json:"inputs"`
	SHA256 string      `json:"sha256"`
	Size   int64       `json:"size"`
	// The snapshot VM's scratch disk as saved (slot.scratch): every
	// restored VM gets a copy (its sum is sparseSHA256's).
	ScratchSHA256 string    `json:"scratch_sha256"`
	ScratchSize   int64     `json:"scratch_size"`
	BuiltAt       time.Time `json:"built_at"`
	BuildMS       int64     `json:"build_ms"`
}

// snapshots is the service's snapshot state: builds under way, restore
// failures per slot and the counters /metrics shows.
type snapshots struct {
	mu        sync.Mutex
	building  map[string]string // slot file -> snapshot VM id
	failures  map[string]int    // slot file -> restores failed in a row
	until     map[string]time.Time
	restores  int64
	fallback  map[string]int64
	builds    int64
	spares    map[string]spare // slot file -> the next restore's prepared files
	preparing map[string]bool  // slot file -> a spare is being prepared
	swept     map[string]bool  // slot file -> orphan spares removed
}

// spare is a restore's files made ahead (spare.go): a checked copy of the
// snapshot file and of its scratch disk.
type spare struct {
	snap, scratch string
	sum           string // the snapshot's SHA256 it was copied from
	// from is what the snapshot's files were when copied: a spare of a
	// file changed since is not used (the restore copies, and checks,
	// the file as it is now).
	from string
}

func newSnapshots() *snapshots {
	return &snapshots{building: map[string]string{}, failures: map[string]int{}, until: map[string]time.Time{}, fallback: map[string]int64{},
		spares: map[string]spare{}, preparing: map[string]bool{}, swept: map[string]bool{}}
}

// SnapshotCounts are the snapshot counters since the service started.
type SnapshotCounts struct {
	Restores int64            // VMs restored from a snapshot
	Fallback map[string]int64 // cold boots by reason (Fallback*)
	Builds   int64            // snapshots built
}

// SnapshotCounts reports the counters.
func (s *Service) SnapshotCounts() SnapshotCounts {
	s.snaps.mu.Lock()
	defer s.snaps.mu.Unlock()
	fb := make(map[string]int64, len(s.snaps.fallback))
	for k, v := range s.snaps.fallback {
		fb[k] = v
	}
	return SnapshotCounts{Restores: s.snaps.restores, Fallback: fb, Builds: s.snaps.builds}
}

// snapshotBuilding reports whether id is a snapshot VM being built (not an
// orphan for reconcile).
func (s *Service) snapshotBuilding(id string) bool {
	s.snaps.mu.Lock()
	defer s.snaps.mu.Unlock()
	for _, v := range s.snaps.building {
		if v == id {
			return true
		}
	}
	return false
}

// snapshotDir is where a host's snapshots live: the folder HostFiles gives
// for files the host writes itself (DataDir/hosts/<installation> locally;
// "" when it is not there: snapshots off). This process hashes and clones
// the file there and libvirtd restores the clone. A remote host's are
// volumes of its pool, handled through libvirt (snapshot_remote.go): its
// "dir" is only a key of the service's maps.
func (s *Service) snapshotDir(files HostFiles) string {
	if files.Mode == FilesRemote {
		return remoteSnapshotDir(files) // through the pool (snapshot_remote.go)
	}
	if st, err := os.Stat(files.Dir); err != nil || !st.IsDir() {
		return ""
	}
	return files.Dir
}

// snapshotSlot is the file name stem of vm's snapshot: per VM shape, and
// per tenant unless snapshots are shared (Config.SnapshotsShared).
func (s *Service) snapshotSlot(vm VM) string {
	slot := "snapshot-vm-" + strconv.Itoa(vm.MemoryMiB) + "m-" + strconv.Itoa(vm.VCPUs) + "c"
	if t := s.snapshotTenant(vm); t != "" {
		h := sha256.Sum256([]byte(t))
		slot += "-t" + hex.EncodeToString(h[:8])
	}
	return slot
}

// snapshotTenant is the tenant vm's snapshot belongs to; "" when
// snapshots are shared.
func (s *Service) snapshotTenant(vm VM) string {
	if s.cfg.SnapshotsShared {
		return ""
	}
	return vm.TenantID
}

func (s *Service) snapshotKeyFor(ctx context.Context, hv Hypervisor, vm VM, files HostFiles) (snapshotKey, error) {
	m, err := image.Load(s.cfg.DataDir)
	if err != nil {
		return snapshotKey{}, err
	}
	t, err := hv.DomainType(ctx)
	if err != nil {
		return snapshotKey{}, err
	}
	k := snapshotKey{
		Format: snapshotFormat, Installation: s.installID, Tenant: s.snapshotTenant(vm), Host: vm.HostURI, DomainType: t,
		MemoryMiB: vm.MemoryMiB, VCPUs: vm.VCPUs,
		Guest: strings.Join([]string{m.Guest.Version, files.Kernel, files.Initramfs, m.Guest.Cmdline}, " "),
	}
	if d, err := hypervisor.BuildDomain(hypervisor.DomainSpec{ID: "snapshot-key", InstallationID: s.installID, Type: t,
		VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, Kernel: files.Kernel, Initramfs: files.Initramfs, Cmdline: m.Guest.Cmdline,
		ChannelName: agentproto.ChannelName}); err == nil {
		cpu, _ := xml.Marshal(d.CPU)
		feat, _ := xml.Marshal(d.Features)
		k.CPU = string(cpu) + string(feat)
	} else {
		s.log.Warn("vm snapshot key: domain cpu", "err", err)
	}
	for i, tp := range m.Templates {
		if i < len(files.Templates) {
			k.Templates = append(k.Templates, tp.Name+"@"+tp.Version+"="+files.Templates[i].Path+"@"+files.Templates[i].Target)
		}
	}
	return k, nil
}

// snapshotFor returns the snapshot to restore vm from, or nil and why not
// (starting a build when there is none or it is stale or corrupt).
func (s *Service) snapshotFor(ctx context.Context, hv Hypervisor, vm VM, guest image.Guest, files HostFiles) (*restorable, string) {
	if !s.cfg.Snapshots {
		return nil, FallbackOff
	}
	if _, ok := hv.(snapshotHV); !ok {
		return nil, FallbackOff
	}
	dir, slot := s.snapshotDir(files), s.snapshotSlot(vm)
	if dir == "" {
		return nil, FallbackOff
	}
	key, err := s.snapshotKeyFor(ctx, hv, vm, files)
	if err != nil {
		s.log.Warn("vm snapshot key", "host", vm.HostURI, "err", err)
		return nil, FallbackOff
	}
	s.snaps.mu.Lock()
	backoff := s.cfg.Clock.Now().Before(s.snaps.until[dir+slot])
	_, building := s.snaps.building[dir+slot]
	s.snaps.mu.Unlock()
	if backoff {
		return nil, FallbackBackoff
	}
	if building {
		return nil, FallbackBuilding
	}
	if files.Mode == FilesRemote {
		snap, reason := s.remoteSnapshotFor(ctx, hv, vm, guest, files, key, slot)
		if snap == nil {
			return nil, reason
		}
		return &restorable{snap: *snap}, "" // no scratch disk in it: a fresh one is hot-plugged
	}
	meta, err := readSnapshotMeta(filepath.Join(dir, slot+".json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, FallbackNone
	case err != nil:
		s.log.Warn("vm snapshot unreadable: rebuilding", "host", vm.HostURI, "slot", slot, "err", err)
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, FallbackCorrupt
	case meta.Key != key.sum():
		s.log.Info("vm snapshot stale (image or vm shape changed): rebuilding", "host", vm.HostURI, "slot", slot)
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, FallbackStale
	}
	p := filepath.Join(dir, slot+".snap")
	if st, err := os.Stat(p); err != nil || st.Size() != meta.Size {
		s.log.Warn("vm snapshot file missing or resized: rebuilding", "host", vm.HostURI, "slot", slot, "err", err)
		s.buildSnapshot(hv, vm, guest, files, key)
		return nil, FallbackCorrupt
	}
	return &restorable{snap: hypervisor.Snapshot{Path: p, SHA256: meta.SHA256}, scratch: filepath.Join(dir, slot+".scratch"),
		scratchSum: meta.ScratchSHA256}, ""
}

// restorable is a snapshot to restore: its file and its scratch disk's.
// A remote host's has no scratch disk (scratch ""): the snapshot VM had
// none, and the restored VM gets its fresh scratch volume hot-plugged.
type restorable struct {
	snap       hypervisor.Snapshot
	scratch    string
	scratchSum string
}

// hotScratch is what hot-plugs a remote restored VM's scratch volume
// (*hypervisor.Host).
type hotScratch interface {
	AttachDisk(ctx context.Context, id string, d hypervisor.HotDisk) error
}

func readSnapshotMeta(path string) (snapshotMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return snapshotMeta{}, err
	}
	var m snapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata %s: %w", path, err)
	}
	return m, nil
}

// restoreVM restores vm from its host's snapshot, with a copy of the
// snapshot's scratch disk as its own (at scratch.Path), and does the
// handshake. On failure it leaves no domain, a fresh scratch disk, and
// returns a nil client and the fallback reason (with detail) for the cold
// boot.
func (s *Service) restoreVM(ctx context.Context, hv Hypervisor, vm VM, guest image.Guest, files HostFiles, spec hypervisor.DomainSpec,
	scratch hypervisor.Disk) (*hypervisor.Domain, *agentproto.Client, string) {
	rs, reason := s.snapshotFor(ctx, hv, vm, guest, files)
	if rs == nil {
		return nil, nil, reason
	}
	shv := hv.(snapshotHV)
	dir, slot := s.snapshotDir(files), s.snapshotSlot(vm)
	placed := false
	fail := func(reason string, err error) (*hypervisor.Domain, *agentproto.Client, string) {
		if placed {
			// The cold boot gets a fresh scratch disk, not the snapshot's.
			if _, cerr := s.createScratch(context.WithoutCancel(ctx), vm, len(files.Templates)); cerr != nil {
				s.log.Warn("fresh scratch disk after a failed restore", "vm", vm.ID, "err", cerr)
			}
		}
		if ctx.Err() != nil {
			return nil, nil, ""
		}
		s.snapshotFailed(hv, vm, guest, files, dir, slot, reason, err)
		return nil, nil, reason + ": " + truncate(err.Error(), 200)
	}
	t0 := time.Now()
	warm := rs.scratch != ""
	snap, sp := rs.snap, (*spare)(nil)
	if warm {
		if sp = s.takeSpare(dir+slot, rs); sp != nil {
			snap.Prepared = sp.snap
		}
		placed = true
		if err := placeScratch(sp, rs, scratch.Path); err != nil {
			if sp != nil {
				os.Remove(sp.snap)
			}
			return fail(FallbackCorrupt, err)
		}
		spec.Disks = append(slices.Clip(spec.Disks), scratch)
	}
	tp := time.Now()
	dom, err := shv.Restore(ctx, spec, snap)
	if err != nil {
		if errors.Is(err, hypervisor.ErrSnapshotCorrupt) {
			return fail(FallbackCorrupt, err)
		}
		if errors.Is(err, hypervisor.ErrSnapshotMismatch) {
			return fail(FallbackStale, err)
		}
		return fail(FallbackFailed, err)
	}
	undo := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := hv.Destroy(dctx, vm.ID); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
			s.log.Warn("destroy failed restore", "vm", vm.ID, "err", err)
		}
	}
	if !warm {
		// A remote host's snapshot has no scratch disk: the VM's fresh
		// one is hot-plugged at the target a cold boot puts it at, and
		// the agent mounts it when the first sandbox needs it.
		hs, ok := hv.(hotScratch)
		if !ok {
			undo()
			return fail(FallbackFailed, errors.New("attach scratch disk: the host cannot hot-plug disks"))
		}
		if err := hs.AttachDisk(ctx, vm.ID, hypervisor.HotDisk{Path: scratch.Path, Target: scratch.Target, Discard: true}); err != nil {
			undo()
			return fail(FallbackFailed, fmt.Errorf("attach scratch disk: %w", err))
		}
	}
	t1 := time.Now()
	s.phase(vm.ID, PhaseBooting)
	timeout := min(s.cfg.BootTimeout, time.Minute)
	client, err := s.handshake(ctx, hv, vm, timeout, func() { s.phase(vm.ID, PhaseHandshake) })
	if err != nil {
		undo()
		return fail(FallbackFailed, fmt.Errorf("agent handshake: %w", err))
	}
	s.log.Info("vm restored from snapshot", "vm", vm.ID, "spare", sp != nil, "scratch", tp.Sub(t0).Round(time.Millisecond),
		"restore", t1.Sub(tp).Round(time.Millisecond), "handshake", time.Since(t1).Round(time.Millisecond))
	s.snaps.mu.Lock()
	s.snaps.restores++
	delete(s.snaps.failures, dir+slot)
	s.snaps.mu.Unlock()
	if warm {
		s.prepareSpare(shv, dir, slot, rs) // the next restore's
	}
	return dom, client, ""
}

// noteFallback counts a cold boot by reason.
func (s *Service) noteFallback(reason string) {
	r, _, _ := strings.Cut(reason, ":")
	s.snaps.mu.Lock()
	s.snaps.fallback[r]++
	s.snaps.mu.Unlock()
}

// snapshotFailed handles a snapshot that would not restore: it is removed
// and rebuilt; after two failures in a row the slot cold boots for ten
// minutes, so a snapshot that cannot work does not cost every boot a try.
func (s *Service) snapshotFailed(hv Hypervisor, vm VM, guest image.Guest, files HostFiles, dir, slot, reason string, err error) {
	s.log.Warn("vm snapshot restore failed: cold boot; rebuilding the snapshot", "vm", vm.ID, "host", vm.HostURI,
		"slot", slot, "reason", reason, "err", err)
	s.snaps.mu.Lock()
	delete(s.snaps.spares, dir+slot)
	s.snaps.mu.Unlock()
	if files.Mode == FilesRemote {
		s.removeRemoteSnapshot(hv, files, slot) // snapshot_remote.go
	} else {
		for _, p := range snapshotFiles(dir, slot) {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Warn("remove vm snapshot", "file", p, "err", err)
			}
		}
	}
	s.snaps.mu.Lock()
	s.snaps.failures[dir+slot]++
	n := s.snaps.failures[dir+slot]
	if n >= 2 {
		s.snaps.until[dir+slot] = s.cfg.Clock.Now().Add(10 * time.Minute)
	}
	s.snaps.mu.Unlock()
	if n >= 2 {
		return
	}
	ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if key, err := s.snapshotKeyFor(ctx, hv, vm, files); err == nil {
		s.buildSnapshot(hv, vm, guest, files, key)
	}
}

// buildSnapshot builds the snapshot for vm's host and shape in the
// background, unless a build is under way.
func (s *Service) buildSnapshot(hv Hypervisor, vm VM, guest image.Guest, files HostFiles, key snapshotKey) {
	dir, slot := s.snapshotDir(files), s.snapshotSlot(vm)
	id := snapshotVMPrefix + uuid.NewString()
	s.snaps.mu.Lock()
	if _, busy := s.snaps.building[dir+slot]; busy {
		s.snaps.mu.Unlock()
		return
	}
	s.snaps.building[dir+slot] = id
	s.snaps.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.snaps.mu.Lock()
			delete(s.snaps.building, dir+slot)
			s.snaps.mu.Unlock()
		}()
		start := time.Now()
		var meta snapshotMeta
		// A build that fails (a guest that did not come up on a loaded
		// host) is tried again, three times in all, a minute apart.
		for attempt := 1; ; attempt++ {
			ctx, cancel := s.stop.WithTimeout(context.Background(), s.cfg.BootTimeout+2*time.Minute)
			var m snapshotMeta
			err := errors.New("snapshot vm lease not taken")
			if s.leaseSnapshotVM(ctx, id) { // snapshot_orphans.go
				m, err = s.saveSnapshot(ctx, hv.(snapshotHV), hv, id, vm, guest, files, key, dir, slot)
				s.releaseSnapshotVM(context.WithoutCancel(ctx), id)
			}
			cancel()
			if err == nil {
				meta = m
				break
			}
			if s.stop.Err() != nil {
				return
			}
			s.log.Warn("vm snapshot build failed", "host", vm.HostURI, "slot", slot, "attempt", attempt, "err", err)
			if attempt == 3 {
				return
			}
			select {
			case <-s.cfg.Clock.After(time.Minute):
			case <-s.stop.Done():
				return
			}
			id = snapshotVMPrefix + uuid.NewString()
			s.snaps.mu.Lock()
			s.snaps.building[dir+slot] = id
			s.snaps.mu.Unlock()
		}
		s.snaps.mu.Lock()
		s.snaps.builds++
		s.snaps.mu.Unlock()
		s.log.Info("vm snapshot built", "host", vm.HostURI, "slot", slot, "took", time.Since(start).Round(time.Millisecond),
			"mib", meta.Size>>20)
		if files.Mode == FilesRemote {
			return // no spares on a remote host: its restores clone volumes on the host
		}
		s.prepareSpare(hv.(snapshotHV), dir, slot, &restorable{snap: hypervisor.Snapshot{Path: filepath.Join(dir, slot+".snap"), SHA256: meta.SHA256},
			scratch: filepath.Join(dir, slot+".scratch"), scratchSum: meta.ScratchSHA256})
	}()
}

// saveSnapshot boots the snapshot VM id (templates only, no tenant), waits
// for its agent, ends the session and saves it to dir/slot.snap with its
// sidecar.
func (s *Service) saveSnapshot(ctx context.Context, shv snapshotHV, hv Hypervisor, id string, vm VM, guest image.Guest,
	files HostFiles, key snapshotKey, dir, slot string) (snapshotMeta, error) {
	start := time.Now()
	// Its own scratch disk, at the target a VM's is: saved with it, and
	// copied for every restored VM (the pre-started sandboxes' folders
	// are on it). A remote host's snapshot VM has none and stays cold
	// (templates only, no pre-started sandboxes): a VM restored there
	// gets a fresh scratch volume hot-plugged (restoreVM).
	remote := files.Mode == FilesRemote
	final := filepath.Join(dir, slot+".snap")
	tmp := final + ".tmp-" + id
	scratchTmp := filepath.Join(dir, slot+".scratch.tmp-"+id)
	spec := hypervisor.DomainSpec{
		ID: id, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB,
		Kernel: files.Kernel, Initramfs: files.Initramfs, Cmdline: guest.Cmdline,
		ChannelName: agentproto.ChannelName,
		Disks:       slices.Clip(files.Templates),
	}
	if !remote {
		defer os.Remove(tmp)
		defer os.Remove(scratchTmp)
		if err := image.CreateScratch(ctx, scratchTmp, s.cfg.ScratchMiB); err != nil {
			return snapshotMeta{}, err
		}
		spec.Disks = append(spec.Disks, hypervisor.Disk{Path: scratchTmp, Target: scratchTarget(len(files.Templates)), Discard: true})
	}
	if _, err := hv.Create(ctx, spec); err != nil {
		return snapshotMeta{}, err
	}
	saved := false
	defer func() {
		if !saved {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := hv.Destroy(dctx, id); err != nil && !errors.Is(err, hypervisor.ErrNotFound) {
				s.log.Warn("destroy snapshot vm", "vm", id, "err", err)
			}
		}
	}()
	client, err := s.handshake(ctx, hv, VM{ID: id, HostURI: vm.HostURI}, s.cfg.BootTimeout, nil)
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot vm handshake: %w", err)
	}
	// Warm: the pool's pre-started sandboxes started (crun, the template
	// disks and the scratch disk used once), so a restored VM's first
	// create claims one. They hold nothing of anyone's.
	if !remote {
		s.warmSnapshotVM(ctx, VM{ID: id, HostURI: vm.HostURI, TenantID: vm.TenantID, MemoryMiB: vm.MemoryMiB, VCPUs: vm.VCPUs}, client)
	}
	client.Close()
	// Let the balloon's free page reporting (2 s after pages are freed)
	// hand back what boot freed: reported pages are zero to QEMU and cost
	// nothing in the snapshot.
	select {
	case <-s.cfg.Clock.After(snapshotSettle):
	case <-ctx.Done():
		return snapshotMeta{}, ctx.Err()
	}
	if remote {
		meta, err := s.saveRemoteSnapshot(ctx, hv, id, key, slot, start) // snapshot_remote.go
		saved = err == nil
		return meta, err
	}
	if err := shv.SaveSnapshot(ctx, id, tmp); err != nil {
		return snapshotMeta{}, err
	}
	saved = true
	sum, size, err := fileSHA256(tmp)
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("hash snapshot: %w", err)
	}
	scratchSum, scratchSize, err := sparseCopy(scratchTmp, "")
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("hash snapshot scratch disk: %w", err)
	}
	if err := os.Rename(scratchTmp, filepath.Join(dir, slot+".scratch")); err != nil {
		return snapshotMeta{}, fmt.Errorf("install snapshot: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return snapshotMeta{}, fmt.Errorf("install snapshot: %w", err)
	}
	meta := snapshotMeta{Key: key.sum(), Inputs: key, SHA256: sum, Size: size, ScratchSHA256: scratchSum, ScratchSize: scratchSize,
		BuiltAt: s.cfg.Clock.Now().UTC(), BuildMS: time.Since(start).Milliseconds()}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	side := filepath.Join(dir, slot+".json")
	if err := os.WriteFile(side+".tmp", b, 0o644); err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	if err := os.Rename(side+".tmp", side); err != nil {
		return snapshotMeta{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	return meta, nil
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
