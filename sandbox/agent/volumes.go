package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Volumes. The host hot-attaches a tenant volume's disk with the volume id
// as its serial; the agent finds the disk by that serial (never by its
// slot, which a detach and attach can reuse), mounts it at
// StateDir/volumes/<id> and binds it into the sandboxes that asked for it.
// A disk attached read-only is mounted ro,noload: nothing, not even a
// journal replay, writes to a file system another VM may hold.

// volumeDir is where the volume id is mounted in the VM.
func (m *Manager) volumeDir(id string) string {
	return filepath.Join(m.cfg.StateDir, "volumes", id)
}

// findVolumeDisk returns the device of the disk whose serial is id.
func (m *Manager) findVolumeDisk(id string) (string, error) {
	entries, err := os.ReadDir(m.cfg.SysBlockDir)
	if err != nil {
		return "", fmt.Errorf("find volume %s: %w", id, err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "vd") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.cfg.SysBlockDir, name, "serial"))
		if err != nil || strings.TrimSpace(string(b)) != id {
			continue
		}
		return filepath.Join(m.cfg.DevDir, name), nil
	}
	return "", fmt.Errorf("volume %s: no disk has this serial: %w", id, agentproto.ErrNotFound)
}

// volumeDiskWait bounds the wait for a hot-plugged disk to show.
const volumeDiskWait = time.Minute

// waitVolumeDisk finds the disk of volume id, looking again until it shows
// (within volumeDiskWait and ctx).
func (m *Manager) waitVolumeDisk(ctx context.Context, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, volumeDiskWait)
	defer cancel()
	for {
		dev, err := m.findVolumeDisk(id)
		if err == nil || !errors.Is(err, agentproto.ErrNotFound) {
			return dev, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MountVolume mounts the volume disk id in the VM; mounting one that is
// mounted already in the same mode does nothing.
func (m *Manager) MountVolume(ctx context.Context, req agentproto.VolumeRequest) error {
	if !agentproto.ValidVolumeID.MatchString(req.ID) {
		return fmt.Errorf("mount volume %q: %w", req.ID, agentproto.ErrBadRequest)
	}
	// A disk hot-plugged a moment ago shows once the guest has probed it.
	dev, err := m.waitVolumeDisk(ctx, req.ID)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir := m.volumeDir(req.ID)
	if ro, ok := mountedReadOnly(dir); ok {
		if ro == req.ReadOnly {
			return nil
		}
		return fmt.Errorf("mount volume %s: mounted already in the other mode: %w", req.ID, agentproto.ErrConflict)
	}
	flags, data := uintptr(unix.MS_NOSUID|unix.MS_NODEV), ""
	if req.ReadOnly {
		flags, data = flags|unix.MS_RDONLY, "noload"
	}
	if err := mountFresh(ctx, dev, dir, flags, data); err != nil {
		os.Remove(dir)
		return fmt.Errorf("mount volume %s: %w", req.ID, err)
	}
	m.log.Info("volume mounted", "volume", req.ID, "device", dev, "read_only", req.ReadOnly)
	return nil
}

// UnmountVolume unmounts volume id from the VM, syncing it to its disk; a
// sandbox that still binds it is a conflict.
func (m *Manager) UnmountVolume(req agentproto.VolumeRequest) error {
	if !agentproto.ValidVolumeID.MatchString(req.ID) {
		return fmt.Errorf("unmount volume %q: %w", req.ID, agentproto.ErrBadRequest)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sb := range m.sandboxes {
		for _, b := range sb.spec.Volumes {
			if b.ID == req.ID {
				return fmt.Errorf("unmount volume %s: sandbox %s binds it: %w", req.ID, sb.id, agentproto.ErrConflict)
			}
		}
	}
	dir := m.volumeDir(req.ID)
	if _, ok := mountedReadOnly(dir); !ok {
		return nil
	}
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount volume %s: %w", req.ID, err)
	}
	os.Remove(dir)
	m.log.Info("volume unmounted", "volume", req.ID)
	return nil
}

// mountFresh mounts the ext4 disk dev at dir. A disk hot-plugged a moment
// ago can show in sysfs before its device opens (ENODEV, ENXIO, ENOENT):
// those are tried again, within volumeDiskWait and ctx.
func mountFresh(ctx context.Context, dev, dir string, flags uintptr, data string) error {
	ctx, cancel := context.WithTimeout(ctx, volumeDiskWait)
	defer cancel()
	for {
		err := mount(dev, dir, "ext4", flags, data)
		if err == nil || !(errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT)) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (kernel: %s)", err, kernelTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kernelTail is the end of the kernel's log, for a mount's error.
func kernelTail() string {
	buf := make([]byte, 1<<16)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil || n <= 0 {
		return "unreadable"
	}
	lines := strings.Split(strings.TrimSpace(string(buf[:n])), "\n")
	return strings.Join(lines[max(0, len(lines)-4):], " | ")
}

// mountedReadOnly reports whether dir is a mount point, and if so whether
// it is read-only.
func mountedReadOnly(dir string) (readOnly, ok bool) {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil || st.Dev == parent.Dev {
		return false, false
	}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return false, true
	}
	return fs.Flags&unix.ST_RDONLY != 0, true
}

// volumeMounts are the OCI bind mounts of a sandbox's volumes: each must be
// mounted in the VM, read-only when the VM's mount is.
func (m *Manager) volumeMounts(binds []agentproto.VolumeBind) ([]ociMount, error) {
	if err := agentproto.CheckVolumeBinds(binds); err != nil {
		return nil, fmt.Errorf("volumes: %w: %w", err, agentproto.ErrBadRequest)
	}
	out := make([]ociMount, 0, len(binds))
	for _, b := range binds {
		dir := m.volumeDir(b.ID)
		ro, ok := mountedReadOnly(dir)
		if !ok {
			return nil, fmt.Errorf("volume %s is not mounted in this vm: %w", b.ID, agentproto.ErrNotFound)
		}
		if ro && !b.ReadOnly {
			return nil, fmt.Errorf("volume %s is mounted read-only in this vm: %w", b.ID, agentproto.ErrConflict)
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		}
		out = append(out, ociMount{Destination: b.Path, Type: "bind", Source: dir, Options: opts})
	}
	return out, nil
}

// serveVolume answers OpVolumeMount and OpVolumeUnmount.
func (s *Server) serveVolume(ctx context.Context, st net.Conn, req agentproto.Request) {
	m := s.cfg.Sandboxes
	var err error
	switch {
	case m == nil:
		err = fmt.Errorf("op %s: %w", req.Op, agentproto.ErrNotImplemented)
	case req.Volume == nil:
		err = fmt.Errorf("%s without a volume: %w", req.Op, agentproto.ErrBadRequest)
	case req.Op == agentproto.OpVolumeMount:
		err = m.MountVolume(ctx, *req.Volume)
	default:
		err = m.UnmountVolume(*req.Volume)
	}
	if err != nil && !errors.Is(err, agentproto.ErrNotFound) {
		s.log.Warn("volume op", "op", req.Op, "err", err)
	}
	if err != nil {
		s.reply(st, agentproto.Response{Error: agentproto.ErrorFor(err)})
		return
	}
	s.reply(st, agentproto.Response{})
}
