package agent

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The VM's scratch disk (see doc.go). The host attaches one sparse XFS
// disk per VM; the agent mounts it with project quotas enforced and gives
// every sandbox two folders on it, each its own quota project: the writable
// layer (DiskMiB) and /workspace (WorkspaceMiB). A full one fails the
// writer's write with ENOSPC, "No space left on device" (XFS reports a
// project over its limit as a full disk; ext4 would say EDQUOT, "Disk quota
// exceeded"), and costs no guest memory, so filling it stops neither the
// sandbox nor its neighbours. statfs of a project folder reports the
// project's limit, so df inside the sandbox shows its own sizes, and a
// write that fills them fails the way it would on a disk of that size.
const (
	// ScratchLabel is the XFS label of the scratch disk; it must match
	// hypervisor/image.ScratchLabel.
	ScratchLabel = "stk.scratch"

	// Kernel interfaces x/sys/unix does not spell (linux/fs.h, quota.h).
	fsIocFSGetXattr    = 0x801c581f
	fsIocFSSetXattr    = 0x401c5820
	fsIoc32SetFlags    = 0x40046602
	fiTrim             = 0xc0185879
	fsXflagProjInherit = 0x00000200
	qSetQuota          = 0x800008
	prjQuota           = 2
	qifBLimits         = 1
	qifILimits         = 4
	quotaBlockBytes    = 1024
	// prjquota: account and enforce project quotas.
	scratchMountOptions = "prjquota"
	// XFS superblock fields (the superblock starts at byte 0).
	xfsMagic       = "XFSB"
	xfsLabelOffset = 108
	xfsLabelLen    = 12
	// trimDelay batches the trims after destroys: one FITRIM walks every
	// block group that freed blocks, on the guest's only CPU.
	trimDelay = time.Minute
)

// fsxattr is struct fsxattr of linux/fs.h.
type fsxattr struct {
	XFlags, ExtSize, NExtents, ProjID, CowExtSize uint32
	_                                             [8]byte
}

// ifDqblk is struct if_dqblk of linux/quota.h.
type ifDqblk struct {
	BHardLimit, BSoftLimit, CurSpace, IHardLimit, ISoftLimit, CurInodes, BTime, ITime uint64
	Valid                                                                             uint32
	_                                                                                 uint32
}

// scratch is the mounted scratch disk, once found.
type scratch struct {
	sysBlock, devDir, dir string

	mu      sync.Mutex
	mounted bool
	seen    map[string]bool
	next    uint32 // last quota project id handed out
	trimMu  sync.Mutex
	trimAt  *time.Timer // a trim is due (trimSoon)
}

func newScratch(sysBlock, devDir, dir string) *scratch {
	return &scratch{sysBlock: sysBlock, devDir: devDir, dir: dir, seen: map[string]bool{}}
}

// find mounts the scratch disk if it is there and not mounted yet, and
// reports whether it is mounted.
func (s *scratch) find() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mounted {
		return true, nil
	}
	entries, err := os.ReadDir(s.sysBlock)
	if err != nil {
		return false, fmt.Errorf("find scratch disk: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "vd") || s.seen[name] {
			continue
		}
		dev := filepath.Join(s.devDir, name)
		label, err := xfsLabel(dev)
		if err != nil {
			continue // not readable yet: look again next time
		}
		s.seen[name] = true
		if label != ScratchLabel {
			continue
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return false, fmt.Errorf("mount scratch disk: %w", err)
		}
		if err := unix.Mount(dev, s.dir, "xfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, scratchMountOptions); err != nil {
			return false, fmt.Errorf("mount scratch disk %s: %w", dev, err)
		}
		s.mounted = true
		return true, nil
	}
	return false, nil
}

// xfsLabel reads the label of the XFS file system on dev; "" when dev
// holds none.
func xfsLabel(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sb := make([]byte, xfsLabelOffset+xfsLabelLen)
	if _, err := io.ReadFull(f, sb); err != nil {
		return "", err
	}
	if string(sb[:len(xfsMagic)]) != xfsMagic {
		return "", nil
	}
	label := sb[xfsLabelOffset:]
	if i := bytes.IndexByte(label, 0); i >= 0 {
		label = label[:i]
	}
	return string(label), nil
}

// projects hands out n fresh quota project ids.
func (s *scratch) projects(n int) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, n)
	for i := range out {
		s.next++
		out[i] = s.next
	}
	return out
}

// makeDir makes dir as a quota project of mib MiB (and inodesFor(mib)
// files) that everything created below it inherits.
func (s *scratch) makeDir(dir string, project uint32, mib int, uid, gid int) error {
	if err := s.setQuota(project, uint64(mib)<<20/quotaBlockBytes, uint64(inodesFor(mib))); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("scratch folder: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("scratch folder: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("scratch folder: %w", err)
	}
	defer unix.Close(fd)
	var fa fsxattr
	if err := ioctlPtr(fd, fsIocFSGetXattr, unsafe.Pointer(&fa)); err != nil {
		return fmt.Errorf("scratch folder %s: get project: %w", dir, err)
	}
	fa.ProjID, fa.XFlags = project, fa.XFlags|fsXflagProjInherit
	if err := ioctlPtr(fd, fsIocFSSetXattr, unsafe.Pointer(&fa)); err != nil {
		return fmt.Errorf("scratch folder %s: set project: %w", dir, err)
	}
	return nil
}

// setQuota sets a project's hard limits; zero lifts them.
func (s *scratch) setQuota(project uint32, blocks, inodes uint64) error {
	fd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set quota: %w", err)
	}
	defer unix.Close(fd)
	q := ifDqblk{BHardLimit: blocks, BSoftLimit: blocks, IHardLimit: inodes, ISoftLimit: inodes, Valid: qifBLimits | qifILimits}
	cmd := uintptr(qSetQuota<<8 | prjQuota)
	if _, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(fd), cmd, uintptr(project), uintptr(unsafe.Pointer(&q)), 0, 0); e != 0 {
		return fmt.Errorf("set quota of project %d: %w", project, e)
	}
	return nil
}

// trimSoon trims the disk trimDelay from now unless a trim is due already.
func (s *scratch) trimSoon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.trimAt != nil {
		return
	}
	s.trimAt = time.AfterFunc(trimDelay, func() {
		s.mu.Lock()
		s.trimAt = nil
		s.mu.Unlock()
		s.trim()
	})
}

// trim hands the blocks freed on the scratch disk back to the host's
// sparse file (the disk is attached with discard=unmap).
func (s *scratch) trim() {
	s.trimMu.Lock()
	defer s.trimMu.Unlock()
	fd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	r := struct{ Start, Len, MinLen uint64 }{Len: ^uint64(0)}
	ioctlPtr(fd, fiTrim, unsafe.Pointer(&r))
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p)); e != 0 {
		return e
	}
	return nil
}

// mountScratch mounts the sandbox's writable layer on dir: a quota'd folder
// of the scratch disk bound there, or without a scratch disk (a host that
// attaches none) a tmpfs of DiskMiB, which counts against guest memory.
func (m *Manager) mountScratch(sb *sandbox, dir string) error {
	l := sb.spec.Limits
	ok, err := m.scratch.find()
	if err != nil {
		m.log.Warn("scratch disk", "err", err)
	}
	if !ok {
		m.log.Warn("no scratch disk: the writable layer and /workspace are tmpfs", "sandbox", sb.id)
		if err := mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("size=%dm,nr_inodes=%d,mode=0755", l.DiskMiB, inodesFor(l.DiskMiB))); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		return nil
	}
	base := filepath.Join(m.scratch.dir, sb.id)
	if err := os.Mkdir(base, 0o700); err != nil {
		return fmt.Errorf("bundle: scratch: %w", err)
	}
	sb.scratchDir = base
	ids := m.scratch.projects(2)
	sb.projects = ids
	disk := filepath.Join(base, "disk")
	if err := m.scratch.makeDir(disk, ids[0], l.DiskMiB, 0, 0); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := m.scratch.makeDir(filepath.Join(base, workspaceDir), ids[1], l.WorkspaceMiB, sandboxUID, sandboxGID); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return bindMount(disk, dir)
}

// mountWorkspace mounts /workspace of the sandbox on dir: its quota'd
// folder of the scratch disk, or a tmpfs of WorkspaceMiB.
func (m *Manager) mountWorkspace(sb *sandbox, dir string) error {
	l := sb.spec.Limits
	if sb.scratchDir == "" {
		if err := mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			fmt.Sprintf("size=%dm,nr_inodes=%d,mode=0755,uid=%d,gid=%d", l.WorkspaceMiB, inodesFor(l.WorkspaceMiB), sandboxUID, sandboxGID)); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		return nil
	}
	return bindMount(filepath.Join(sb.scratchDir, workspaceDir), dir)
}

// removeScratch removes the sandbox's folders from the scratch disk (its
// mounts are gone), lifts their quotas and has the disk trimmed soon.
func (m *Manager) removeScratch(sb *sandbox) error {
	if sb.scratchDir == "" {
		return nil
	}
	if err := os.RemoveAll(sb.scratchDir); err != nil {
		return fmt.Errorf("remove scratch folders: %w", err)
	}
	for _, p := range sb.projects {
		if err := m.scratch.setQuota(p, 0, 0); err != nil {
			m.log.Warn("lift quota", "sandbox", sb.id, "err", err)
		}
	}
	m.scratch.trimSoon()
	return nil
}

// bindMount binds src on dst, nosuid and nodev.
func bindMount(src, dst string) error {
	if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("bundle: remount %s nosuid,nodev: %w", dst, err)
	}
	return nil
}

// dropQuotaOverride clears CAP_SYS_RESOURCE from the effective set of every
// thread of this process: with it, root ignores quota limits, and the agent
// writes files into sandboxes (file.write) as root. Children still get it:
// exec as root takes the bounding set, so crun is unaffected.
func dropQuotaOverride() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop CAP_SYS_RESOURCE: %w", err)
	}
	data[unix.CAP_SYS_RESOURCE/32].Effective &^= 1 << (unix.CAP_SYS_RESOURCE % 32)
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("drop CAP_SYS_RESOURCE: %w", e)
	}
	return nil
}
