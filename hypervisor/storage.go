package hypervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Host files (storage*.go). A host that does not share the control plane's
// disk gets the guest image, the templates and each VM's scratch disk as
// volumes of one libvirt "dir" storage pool of this installation, uploaded
// through libvirt itself (virStorageVolUpload), so the host needs nothing
// but libvirtd. Shared files are named by kind and content ("initramfs-
// <sha12>", "template-node-<sha12>.ext4"): a new build is a new name, and
// a name's content never changes. The pool's target folder also holds the
// files the host writes itself (memory snapshots: SnapshotPath).

// DefaultPoolRoot is the folder on each host under which the pool of an
// installation lives (DefaultPoolDir).
const DefaultPoolRoot = "/var/lib/libvirt/stockade"

// PoolName is the storage pool of the installation on every host.
func PoolName(installationID string) string { return namePrefix + installationID }

// DefaultPoolDir is the pool's target folder on a host when Config.PoolDir
// is empty.
func DefaultPoolDir(installationID string) string {
	return filepath.Join(DefaultPoolRoot, installationID)
}

// Volume kinds: the prefix of a shared volume's name.
const (
	KindKernel         = "kernel"
	KindInitramfs      = "initramfs"
	KindTemplate       = "template"        // a built-in template: "template-<name>"
	KindTenantTemplate = "tenant-template" // a tenant template version
	KindScratch        = "scratch"         // one VM's scratch disk: "scratch-<vm id>.img"
)

var (
	validSHA256  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	validVolName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$`)
	// sharedVolRe matches the names VolumeName makes: the volumes GC may
	// delete. Anything else in the pool (scratch disks, snapshots, other
	// files) GC leaves alone.
	sharedVolRe = regexp.MustCompile(`^(kernel|initramfs|template-[a-z0-9._-]+|tenant-template)-[0-9a-f]{12}(\.[a-z0-9]{1,8})?$`)
	// partVolRe matches an upload under way (or abandoned).
	partVolRe = regexp.MustCompile(`\.part-[0-9a-f]{16}$`)
)

// VolumeName names a shared file on a host by kind and content: kind, a
// dash, the first 12 hex digits of its SHA-256, then ext (".ext4" or "").
// kind is KindKernel, KindInitramfs, KindTenantTemplate or
// KindTemplate+"-"+name.
func VolumeName(kind, sha256Hex, ext string) string {
	return kind + "-" + sha256Hex[:min(12, len(sha256Hex))] + ext
}

// ScratchVolumeName is the volume of a VM's scratch disk.
func ScratchVolumeName(vmID string) string { return KindScratch + "-" + vmID + ".img" }

// PoolDir is the folder on the host that holds this installation's pool:
// every volume's path is PoolDir/<name>.
func (h *Host) PoolDir() string { return h.cfg.PoolDir }

// VolumePath is where the volume called name is (or would be) on the host.
func (h *Host) VolumePath(name string) string { return filepath.Join(h.cfg.PoolDir, name) }

// SnapshotPath is where a file the host writes itself (a VM's memory
// snapshot) called name goes on the host: in the pool's folder, which
// EnsurePool made. GC never deletes it (its name is no shared volume's).
func (h *Host) SnapshotPath(name string) string { return h.VolumePath(name) }

// storage is a Host's state of its pool: whether EnsurePool ran, which
// volumes this process verified, and the uploads under way.
type storage struct {
	mu       sync.Mutex
	ready    bool
	verified map[string]uint64 // volume name -> its size, checksum verified by this process
	inflight map[string]*upload
}

type upload struct {
	done chan struct{}
	path string
	err  error
}

func newStorage() *storage {
	return &storage{verified: map[string]uint64{}, inflight: map[string]*upload{}}
}

// EnsurePool makes sure the installation's pool exists on the host, is
// started and autostarts: defined, built (its folder made) and started
// when missing. A pool of that name with another folder is ErrConflict;
// a folder libvirt cannot make is an error naming it.
func (h *Host) EnsurePool(ctx context.Context) error {
	h.store.mu.Lock()
	ready := h.store.ready
	h.store.mu.Unlock()
	if ready {
		return nil
	}
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("ensure storage pool: %w", err)
	}
	defer release()
	if err := h.ensurePoolOn(s.conn); err != nil {
		return fmt.Errorf("ensure storage pool %s on %s: %w", PoolName(h.cfg.InstallationID), h.cfg.URI, err)
	}
	h.store.mu.Lock()
	h.store.ready = true
	h.store.mu.Unlock()
	return nil
}

func (h *Host) ensurePoolOn(conn *libvirt.Connect) error {
	name := PoolName(h.cfg.InstallationID)
	pool, err := conn.LookupStoragePoolByName(name)
	if libvirtCode(err) == libvirt.ERR_NO_STORAGE_POOL {
		pool, err = h.definePool(conn, name)
	}
	if err != nil {
		return h.fail(err)
	}
	defer pool.Free()
	desc, err := pool.GetXMLDesc(0)
	if err != nil {
		return h.fail(err)
	}
	var def libvirtxml.StoragePool
	if err := def.Unmarshal(desc); err != nil {
		return fmt.Errorf("read pool definition: %w", err)
	}
	if def.Target == nil || filepath.Clean(def.Target.Path) != filepath.Clean(h.cfg.PoolDir) {
		got := ""
		if def.Target != nil {
			got = def.Target.Path
		}
		return fmt.Errorf("%w: the pool exists with folder %q, configured %q", ErrConflict, got, h.cfg.PoolDir)
	}
	active, err := pool.IsActive()
	if err != nil {
		return h.fail(err)
	}
	if !active {
		// Its folder may be gone (a host reinstalled): build makes it again.
		if err := pool.Build(libvirt.STORAGE_POOL_BUILD_NO_OVERWRITE); err != nil && libvirtCode(err) != libvirt.ERR_STORAGE_POOL_BUILT {
			h.log.Debug("build storage pool", "pool", name, "err", err)
		}
		if err := pool.Create(0); err != nil && libvirtCode(err) != libvirt.ERR_OPERATION_INVALID {
			return fmt.Errorf("start pool in %s: %w", h.cfg.PoolDir, h.fail(err))
		}
	}
	if auto, err := pool.GetAutostart(); err == nil && !auto {
		if err := pool.SetAutostart(true); err != nil {
			h.log.Warn("storage pool autostart", "pool", name, "err", err)
		}
	}
	return nil
}

// definePool defines, builds and starts the pool. Another replica may be
// doing the same at once (defining the same XML again is harmless; a pool
// it started meanwhile is fine); a folder that cannot be made leaves the
// pool undefined again unless it is running (nothing half-made stays).
func (h *Host) definePool(conn *libvirt.Connect, name string) (*libvirt.StoragePool, error) {
	def := libvirtxml.StoragePool{
		Type: "dir", Name: name,
		Target: &libvirtxml.StoragePoolTarget{Path: h.cfg.PoolDir,
			// QEMU runs as its own user: the folder must be searchable.
			Permissions: &libvirtxml.StoragePoolTargetPermissions{Mode: "0755"}},
	}
	doc, err := def.Marshal()
	if err != nil {
		return nil, fmt.Errorf("pool definition: %w", err)
	}
	pool, err := conn.StoragePoolDefineXML(doc, 0)
	if err != nil {
		if p, lerr := conn.LookupStoragePoolByName(name); lerr == nil {
			return p, nil // another replica defined it meanwhile
		}
		return nil, fmt.Errorf("define pool: %w", err)
	}
	active := func() bool { a, err := pool.IsActive(); return err == nil && a }
	undo := func(what string, err error) (*libvirt.StoragePool, error) {
		if !active() {
			_ = pool.Undefine()
		}
		pool.Free()
		return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalid, what, h.cfg.PoolDir, err)
	}
	if active() {
		return pool, nil
	}
	if err := pool.Build(0); err != nil && !active() {
		return undo("make the pool's folder", err)
	}
	if err := pool.Create(0); err != nil && !active() {
		return undo("start the pool in", err)
	}
	if err := pool.SetAutostart(true); err != nil {
		h.log.Warn("storage pool autostart", "pool", name, "err", err)
	}
	h.log.Info("storage pool ready", "pool", name, "dir", h.cfg.PoolDir)
	return pool, nil
}

// PartMaxAge is how long an upload's temporary volume may go unchanged
// before GC takes it for abandoned.
const PartMaxAge = time.Hour

// Volume is one volume of the installation's pool on a host.
type Volume struct {
	Name       string
	Path       string
	Capacity   uint64 // bytes
	Allocation uint64 // bytes the host's disk holds for it
	// Modified is when its file last changed (zero if libvirt does not say).
	Modified time.Time
}

// Volumes lists the pool's volumes (after a refresh: files the host wrote
// itself are listed too).
func (h *Host) Volumes(ctx context.Context) ([]Volume, error) {
	var out []Volume
	err := h.withPool(ctx, func(pool *libvirt.StoragePool) error {
		if err := pool.Refresh(0); err != nil {
			return h.fail(err)
		}
		vols, err := pool.ListAllStorageVolumes(0)
		if err != nil {
			return h.fail(err)
		}
		for i := range vols {
			v := &vols[i]
			name, nerr := v.GetName()
			path, perr := v.GetPath()
			info, ierr := v.GetInfo()
			desc, derr := v.GetXMLDesc(0)
			v.Free()
			if err := errors.Join(nerr, perr, ierr, derr); err != nil {
				continue // deleted meanwhile
			}
			out = append(out, Volume{Name: name, Path: path, Capacity: info.Capacity, Allocation: info.Allocation, Modified: volModified(desc)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list volumes on %s: %w", h.cfg.URI, err)
	}
	return out, nil
}

// DeleteVolume deletes the pool's volume called name; none is fine.
func (h *Host) DeleteVolume(ctx context.Context, name string) error {
	err := h.withPool(ctx, func(pool *libvirt.StoragePool) error {
		return deleteVol(pool, name)
	})
	if err != nil {
		return fmt.Errorf("delete volume %s on %s: %w", name, h.cfg.URI, err)
	}
	h.store.mu.Lock()
	delete(h.store.verified, name)
	h.store.mu.Unlock()
	return nil
}

func deleteVol(pool *libvirt.StoragePool, name string) error {
	v, err := pool.LookupStorageVolByName(name)
	if libvirtCode(err) == libvirt.ERR_NO_STORAGE_VOL {
		return nil
	}
	if err != nil {
		return classify(err)
	}
	defer v.Free()
	if err := v.Delete(0); err != nil && libvirtCode(err) != libvirt.ERR_NO_STORAGE_VOL {
		return classify(err)
	}
	return nil
}

// withPool runs fn with the installation's pool (ensured first) on the
// control connection.
func (h *Host) withPool(ctx context.Context, fn func(*libvirt.StoragePool) error) error {
	if err := h.EnsurePool(ctx); err != nil {
		return err
	}
	s, release, err := h.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	pool, err := s.conn.LookupStoragePoolByName(PoolName(h.cfg.InstallationID))
	if err != nil {
		if libvirtCode(err) == libvirt.ERR_NO_STORAGE_POOL {
			h.store.mu.Lock()
			h.store.ready = false // undefined behind our back: the next call makes it again
			h.store.mu.Unlock()
		}
		return h.fail(err)
	}
	defer pool.Free()
	return fn(pool)
}

// GC deletes the shared volumes (VolumeName's) of the pool that keep does
// not want and no domain on the host uses, and uploads abandoned by a
// crash (".part-" volumes keep does not want either: keep sees their full
// name). Scratch disks and snapshots are not its business. It returns the
// names deleted.
func (h *Host) GC(ctx context.Context, keep func(name string) bool) ([]string, error) {
	vols, err := h.Volumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc volumes: %w", err)
	}
	used, err := h.pathsInUse(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc volumes on %s: %w", h.cfg.URI, err)
	}
	h.store.mu.Lock()
	busy := map[string]bool{}
	for name := range h.store.inflight {
		busy[name] = true
	}
	h.store.mu.Unlock()
	var deleted []string
	for _, v := range vols {
		shared := sharedVolRe.MatchString(v.Name)
		part := partVolRe.MatchString(v.Name) && sharedVolRe.MatchString(partVolRe.ReplaceAllString(v.Name, ""))
		young := part && (v.Modified.IsZero() || time.Since(v.Modified) < PartMaxAge)
		if (!shared && !part) || young || used[v.Path] || keep(v.Name) || busy[strings.Split(v.Name, ".part-")[0]] {
			continue
		}
		if err := h.DeleteVolume(ctx, v.Name); err != nil {
			if errors.Is(err, ErrConflict) {
				continue // being written (another replica's upload)
			}
			return deleted, err
		}
		h.log.Info("unused volume deleted", "volume", v.Name, "bytes", v.Capacity)
		deleted = append(deleted, v.Name)
	}
	return deleted, nil
}

// pathsInUse are the files every domain on the host (ours or not, running
// or only defined) boots from or has as a disk.
func (h *Host) pathsInUse(ctx context.Context) (map[string]bool, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	doms, err := s.conn.ListAllDomains(0)
	if err != nil {
		return nil, h.fail(err)
	}
	used := map[string]bool{}
	for i := range doms {
		desc, err := doms[i].GetXMLDesc(0)
		doms[i].Free()
		if err != nil {
			continue // gone meanwhile
		}
		var def libvirtxml.Domain
		if err := def.Unmarshal(desc); err != nil {
			return nil, fmt.Errorf("read a domain definition: %w", err)
		}
		if def.OS != nil {
			used[def.OS.Kernel], used[def.OS.Initrd] = true, true
		}
		if def.Devices != nil {
			for _, d := range def.Devices.Disks {
				if d.Source != nil && d.Source.File != nil {
					used[d.Source.File.File] = true
				}
			}
		}
	}
	return used, nil
}

// volModified reads a volume's mtime ("<seconds>.<nanoseconds>") from its
// definition.
func volModified(desc string) time.Time {
	var def libvirtxml.StorageVolume
	if err := def.Unmarshal(desc); err != nil || def.Target == nil || def.Target.Timestamps == nil {
		return time.Time{}
	}
	sec, nsec, _ := strings.Cut(def.Target.Timestamps.Mtime, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}
	}
	ns, _ := strconv.ParseInt((nsec + "000000000")[:9], 10, 64)
	return time.Unix(secs, ns).UTC()
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RemovePool deletes the installation's pool from the host: every volume
// in it, its folder, its definition (a host an operator removes for good,
// or a test's cleanup). A pool that is not there is fine.
func (h *Host) RemovePool(ctx context.Context) error {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("remove storage pool: %w", err)
	}
	defer release()
	h.store.mu.Lock()
	h.store.ready = false
	h.store.verified = map[string]uint64{}
	h.store.mu.Unlock()
	pool, err := s.conn.LookupStoragePoolByName(PoolName(h.cfg.InstallationID))
	if libvirtCode(err) == libvirt.ERR_NO_STORAGE_POOL {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove storage pool: %w", h.fail(err))
	}
	defer pool.Free()
	if active, _ := pool.IsActive(); active {
		_ = pool.Refresh(0)
		vols, err := pool.ListAllStorageVolumes(0)
		if err != nil {
			return fmt.Errorf("remove storage pool: %w", h.fail(err))
		}
		var errs []error
		for i := range vols {
			if err := vols[i].Delete(0); err != nil && libvirtCode(err) != libvirt.ERR_NO_STORAGE_VOL {
				errs = append(errs, err)
			}
			vols[i].Free()
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("remove storage pool: %w", classify(err))
		}
		if err := pool.Destroy(); err != nil {
			return fmt.Errorf("remove storage pool: %w", h.fail(err))
		}
	}
	if err := pool.Delete(0); err != nil {
		h.log.Warn("remove storage pool folder", "dir", h.cfg.PoolDir, "err", err)
	}
	if err := pool.Undefine(); err != nil {
		return fmt.Errorf("remove storage pool: %w", h.fail(err))
	}
	return nil
}
