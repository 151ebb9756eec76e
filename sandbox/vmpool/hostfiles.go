package vmpool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
)

// Host files (hostfiles.go). A VM boots from a kernel, an initramfs and
// the built-in template disks, and gets a scratch disk and hot-plugged
// tenant templates. On a local host (one sharing the control plane's disk)
// they are the data dir's own files, zero copy. On a remote host they are
// volumes of the installation's storage pool on that host
// (hypervisor/storage.go), uploaded through libvirt before the VM is
// defined (its "defining" phase): the first boot on a new host waits for
// the upload, later ones find the volumes there. HostFiles is the one
// lookup every boot path (cold boot, snapshot restore) goes through.

// FilesMode says where a host's VMs find Stockade's files.
type FilesMode string

// Files modes.
const (
	// FilesLocal: the data dir's paths (the host shares the control plane's disk).
	FilesLocal FilesMode = "local"
	// FilesRemote: the host's storage pool, filled through libvirt.
	FilesRemote FilesMode = "remote"
)

// DefaultFilesMode is the mode of a host whose setting is empty: local for
// a URI without a network transport (qemu:///system, qemu+unix://...),
// remote for qemu+tcp, +tls, +ssh, +libssh and any URI naming a host.
func DefaultFilesMode(uri string) FilesMode {
	u, err := url.Parse(uri)
	if err != nil {
		return FilesRemote
	}
	_, transport, _ := strings.Cut(u.Scheme, "+")
	if u.Host == "" && (transport == "" || transport == "unix") {
		return FilesLocal
	}
	return FilesRemote
}

// ParseFilesModes parses "uri=mode" pairs separated by spaces or commas
// (STOCKADE_HOST_FILES); field names the setting in the error.
func ParseFilesModes(field, s string) (map[string]FilesMode, error) {
	out := map[string]FilesMode{}
	for _, kv := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		i := strings.LastIndex(kv, "=")
		if i <= 0 {
			return nil, fmt.Errorf("%s: %q is not uri=local or uri=remote", field, kv)
		}
		uri, mode := kv[:i], FilesMode(kv[i+1:])
		if mode != FilesLocal && mode != FilesRemote {
			return nil, fmt.Errorf("%s: %q: mode %q is not local or remote", field, uri, mode)
		}
		out[uri] = mode
	}
	return out, nil
}

// FilesModeOf is the files mode of the host at uri.
func (s *Service) FilesModeOf(uri string) FilesMode { return filesMode(s.cfg.HostFiles, uri) }

func filesMode(modes map[string]FilesMode, uri string) FilesMode {
	if m, ok := modes[uri]; ok {
		return m
	}
	return DefaultFilesMode(uri)
}

// hostStorage is what a Hypervisor with a storage pool also does
// (*hypervisor.Host does).
type hostStorage interface {
	PoolDir() string
	SnapshotPath(name string) string
	EnsureVolume(ctx context.Context, name, localPath, sha256Hex string) (string, error)
	UploadVolume(ctx context.Context, name, localPath string) (string, error)
	DeleteVolume(ctx context.Context, name string) error
	Volumes(ctx context.Context) ([]hypervisor.Volume, error)
	GC(ctx context.Context, keep func(name string) bool) ([]string, error)
}

// HostFiles are the paths, on one host, of the files its VMs boot from.
type HostFiles struct {
	URI  string
	Mode FilesMode
	// Kernel and Initramfs are the guest's, for DomainSpec.
	Kernel, Initramfs string
	// Templates are the built-in template disks (vdb, vdc, ...), read-only.
	Templates []hypervisor.Disk
	// Dir is the folder on the host for files the host writes itself
	// (memory snapshots): the storage pool's folder on a remote host,
	// DataDir/hosts/<installation id> on a local one (made here).
	Dir string
}

// HostFiles returns where the host at uri finds the guest's files,
// uploading what is missing to a remote host first (this can take minutes
// for a new host: GiBs of templates). Every boot path uses it.
func (s *Service) HostFiles(ctx context.Context, uri string, guest image.Guest) (HostFiles, error) {
	mode := s.FilesModeOf(uri)
	out := HostFiles{URI: uri, Mode: mode}
	m, err := image.Load(s.cfg.DataDir)
	if err != nil {
		return HostFiles{}, fmt.Errorf("files for host %s: %w: %w", uri, ErrUnavailable, err)
	}
	tpls := m.Templates
	if len(tpls) > 'z'-'b' { // the last slot is the scratch disk's
		tpls = tpls[:'z'-'b']
	}
	if mode == FilesLocal {
		out.Kernel, out.Initramfs = guest.Kernel, guest.Initramfs
		for i, t := range tpls {
			out.Templates = append(out.Templates, hypervisor.Disk{Path: t.Path, Target: "vd" + string(rune('b'+i)), ReadOnly: true})
		}
		out.Dir = filepath.Join(s.cfg.DataDir, "hosts", s.installID)
		// QEMU runs as its own user: the folders must be searchable.
		if err := os.MkdirAll(out.Dir, 0o755); err != nil {
			return HostFiles{}, fmt.Errorf("files for host %s: %w", uri, err)
		}
		return out, nil
	}
	st, err := s.storageOf(uri)
	if err != nil {
		return HostFiles{}, fmt.Errorf("files for host %s: %w", uri, err)
	}
	vols, err := guestVolumes(m, guest, tpls)
	if err != nil {
		return HostFiles{}, fmt.Errorf("files for host %s: %w", uri, err)
	}
	paths := make([]string, len(vols))
	for i, v := range vols {
		s.files.used(s.cfg.Clock.Now(), uri, v.name)
		if paths[i], err = st.EnsureVolume(ctx, v.name, v.local, v.sum); err != nil {
			return HostFiles{}, fmt.Errorf("files for host %s: %w", uri, err)
		}
	}
	out.Kernel, out.Initramfs = paths[0], paths[1]
	for i, p := range paths[2:] {
		out.Templates = append(out.Templates, hypervisor.Disk{Path: p, Target: "vd" + string(rune('b'+i)), ReadOnly: true})
	}
	out.Dir = st.PoolDir()
	return out, nil
}

// volFile is a local file of the guest image and its volume's name.
type volFile struct{ name, local, sum string }

// guestVolumes are the volumes a VM of guest boots from: the kernel, the
// initramfs, then the templates tpls, in that order.
func guestVolumes(m image.Manifest, guest image.Guest, tpls []image.Template) ([]volFile, error) {
	var out []volFile
	add := func(kind, local, ext string) error {
		sum, ok := m.Checksums[local]
		if !ok {
			return fmt.Errorf("%s has no checksum in the image manifest: %w", local, image.ErrChanged)
		}
		out = append(out, volFile{name: hypervisor.VolumeName(kind, sum, ext), local: local, sum: sum})
		return nil
	}
	if err := add(hypervisor.KindKernel, guest.Kernel, ""); err != nil {
		return nil, err
	}
	if err := add(hypervisor.KindInitramfs, guest.Initramfs, ""); err != nil {
		return nil, err
	}
	for _, t := range tpls {
		if err := add(hypervisor.KindTemplate+"-"+t.Name, t.Path, filepath.Ext(t.Path)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// storageOf is the connected host at uri as a hostStorage.
func (s *Service) storageOf(uri string) (hostStorage, error) {
	_, hv, err := s.liveHost(uri)
	if err != nil {
		return nil, err
	}
	st, ok := hv.(hostStorage)
	if !ok {
		return nil, fmt.Errorf("%w: host %s has no storage pool to receive the guest's files", ErrUnavailable, uri)
	}
	return st, nil
}

// diskOnHost is the path on the host at uri of the local file path, a
// read-only disk to hot-plug (a tenant template): the file itself on a
// local host, its volume (uploaded when missing) on a remote one. A
// writable disk (a volume) cannot be copied: on a remote host it is
// ErrUnavailable.
func (s *Service) diskOnHost(ctx context.Context, uri, path string, readOnly bool) (string, error) {
	if s.FilesModeOf(uri) == FilesLocal {
		return path, nil
	}
	if !readOnly {
		return "", fmt.Errorf("%w: writable disk %s lives on the control plane's disk; host %s is remote", ErrUnavailable, filepath.Base(path), uri)
	}
	st, err := s.storageOf(uri)
	if err != nil {
		return "", err
	}
	sum, err := s.files.sums.of(path)
	if err != nil {
		return "", fmt.Errorf("disk %s for host %s: %w", filepath.Base(path), uri, err)
	}
	name := hypervisor.VolumeName(hypervisor.KindTenantTemplate, sum, filepath.Ext(path))
	s.files.used(s.cfg.Clock.Now(), uri, name)
	return st.EnsureVolume(ctx, name, path, sum)
}

// fileSums caches the SHA-256 of local read-only files by path, size and
// modification time (a tenant template's file never changes once ready).
type fileSums struct {
	mu sync.Mutex
	m  map[string]fileSum
}

type fileSum struct {
	size  int64
	mtime time.Time
	sum   string
}

func (c *fileSums) of(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	got, ok := c.m[path]
	c.mu.Unlock()
	if ok && got.size == fi.Size() && got.mtime.Equal(fi.ModTime()) {
		return got.sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]fileSum{}
	}
	c.m[path] = fileSum{size: fi.Size(), mtime: fi.ModTime(), sum: sum}
	c.mu.Unlock()
	return sum, nil
}
