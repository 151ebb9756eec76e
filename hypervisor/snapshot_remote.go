package hypervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Memory snapshots on a host whose disk this process does not see
// (snapshot_remote.go). The snapshot is saved by the host's libvirtd into
// the installation's storage pool (virDomainSaveFlags takes a path on the
// host: the pool's folder) and is a pool volume from then on. This process
// never reads it whole: SaveSnapshotVolume records its size and the SHA-256
// of its head (libvirt's header, the domain XML, the cookie and QEMU's
// stream magic), downloaded back through the pool. A restore clones the
// volume on the host (virStorageVolCreateXMLFrom), downloads the clone's
// head and checks it against that sum and the spec, writes the restored
// domain's XML into the clone with a volume upload at the XML's offset
// (virStorageVolUpload with an offset and length), restores from the
// clone's path and deletes the clone once libvirt has loaded it. A damaged
// memory stream past the head is not caught here: QEMU refuses it, or the
// guest does not answer, and the caller cold boots.

// RestoreSuffix is in the name of a clone a restore makes of a snapshot
// (file or volume): "<snapshot>.restore-<vm id>". One left behind by a
// crash is an orphan for the host's sweep.
const RestoreSuffix = ".restore-"

// maxSnapshotHead bounds the head of a save file this process downloads.
const maxSnapshotHead = 4 << 20

// VolumeSnapshot is a memory snapshot kept as a volume of the
// installation's pool on its host.
type VolumeSnapshot struct {
	Volume     string // the volume's name
	Size       int64  // bytes
	HeadLen    int64  // bytes of its head (header, domain XML, cookie, stream magic)
	HeadSHA256 string // hex SHA-256 of those bytes
}

// SaveSnapshotVolume saves our running domain id into the pool as the
// volume name (which must not exist), checks what libvirt wrote and
// returns it; the domain ends. A save that does not check is deleted.
func (h *Host) SaveSnapshotVolume(ctx context.Context, id, name string) (VolumeSnapshot, error) {
	wrap := func(err error) error {
		return fmt.Errorf("save vm %s to volume %s on %s: %w", id, name, h.cfg.URI, err)
	}
	if !validVolName.MatchString(name) {
		return VolumeSnapshot{}, wrap(fmt.Errorf("%w: bad volume name", ErrInvalid))
	}
	if err := h.EnsurePool(ctx); err != nil {
		return VolumeSnapshot{}, wrap(err)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return VolumeSnapshot{}, wrap(err)
	}
	defer xfer.close()
	if v, err := xfer.pool.LookupStorageVolByName(name); err == nil {
		v.Free()
		return VolumeSnapshot{}, wrap(fmt.Errorf("%w: volume exists", ErrConflict))
	}
	if err := h.SaveSnapshot(ctx, id, h.VolumePath(name)); err != nil {
		return VolumeSnapshot{}, err
	}
	snap, err := xfer.checkSaved(ctx, name)
	if err != nil {
		if derr := deleteVol(xfer.pool, name); derr != nil {
			h.log.Warn("delete a snapshot that does not check", "volume", name, "err", derr)
		}
		return VolumeSnapshot{}, wrap(err)
	}
	return snap, nil
}

// checkSaved registers the file libvirt saved (a pool refresh) and reads
// its size and head.
func (x *transfer) checkSaved(ctx context.Context, name string) (VolumeSnapshot, error) {
	if err := x.pool.Refresh(0); err != nil {
		return VolumeSnapshot{}, classify(err)
	}
	v, err := x.pool.LookupStorageVolByName(name)
	if err != nil {
		return VolumeSnapshot{}, classify(err)
	}
	defer v.Free()
	info, err := v.GetInfo()
	if err != nil {
		return VolumeSnapshot{}, classify(err)
	}
	head, _, err := x.readHead(ctx, v, int64(info.Capacity))
	if err != nil {
		return VolumeSnapshot{}, err
	}
	sum := sha256.Sum256(head)
	return VolumeSnapshot{Volume: name, Size: int64(info.Capacity), HeadLen: int64(len(head)), HeadSHA256: hex.EncodeToString(sum[:])}, nil
}

// readHead downloads a save file's head: its header says how long.
func (x *transfer) readHead(ctx context.Context, v *libvirt.StorageVol, size int64) ([]byte, SnapshotHeader, error) {
	fixed, err := x.read(ctx, v, 0, min(size, saveHeaderLen))
	if err != nil {
		return nil, SnapshotHeader{}, err
	}
	if len(fixed) < saveHeaderLen {
		return nil, SnapshotHeader{}, fmt.Errorf("%w: truncated (%d bytes)", ErrSnapshotCorrupt, size)
	}
	n := int64(binary.LittleEndian.Uint32(fixed[saveDataLenOffset:]))
	headLen := saveHeaderLen + n + int64(len(qemuStreamMagic))
	if headLen > maxSnapshotHead || headLen > size {
		return nil, SnapshotHeader{}, fmt.Errorf("%w: header says %d bytes of xml in a file of %d", ErrSnapshotCorrupt, n, size)
	}
	head, err := x.read(ctx, v, 0, headLen)
	if err != nil {
		return nil, SnapshotHeader{}, err
	}
	hdr, err := CheckSnapshot(bytes.NewReader(head), int64(len(head)))
	if err != nil {
		return nil, SnapshotHeader{}, err
	}
	return head, hdr, nil
}

// read downloads n bytes of v from off.
func (x *transfer) read(ctx context.Context, v *libvirt.StorageVol, off, n int64) ([]byte, error) {
	st, err := x.conn.NewStream(0)
	if err != nil {
		return nil, classify(err)
	}
	defer st.Free()
	if err := v.Download(st, uint64(off), uint64(n), 0); err != nil {
		return nil, classify(err)
	}
	out := make([]byte, 0, n)
	err = st.RecvAll(func(_ *libvirt.Stream, b []byte) (int, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if int64(len(out)+len(b)) > n {
			return 0, fmt.Errorf("download sent more than the %d bytes asked for", n)
		}
		out = append(out, b...)
		return len(b), nil
	})
	if err != nil {
		_ = st.Abort()
		return nil, fmt.Errorf("download: %w", err)
	}
	if err := st.Finish(); err != nil {
		return nil, fmt.Errorf("download: finish: %w", classify(err))
	}
	return out, nil
}

// write uploads b into v at off (the rest of v stays).
func (x *transfer) write(v *libvirt.StorageVol, off int64, b []byte) error {
	st, err := x.conn.NewStream(0)
	if err != nil {
		return classify(err)
	}
	defer st.Free()
	if err := v.Upload(st, uint64(off), uint64(len(b)), 0); err != nil {
		return classify(err)
	}
	for len(b) > 0 {
		n, err := st.Send(b[:min(len(b), 256<<10)])
		if err != nil {
			_ = st.Abort()
			return fmt.Errorf("upload: %w", classify(err))
		}
		b = b[n:]
	}
	if err := st.Finish(); err != nil {
		return fmt.Errorf("upload: finish: %w", classify(err))
	}
	return nil
}

// cloneFor makes the file a restore of spec loads from snap (a copy with
// the restored domain's XML in its header) and returns its path on the
// host and how to remove it.
func (h *Host) cloneFor(ctx context.Context, snap Snapshot, want *libvirtxml.Domain, spec DomainSpec) (string, func(), error) {
	if snap.Volume == nil {
		clone := snap.Path + RestoreSuffix + spec.ID
		if err := h.cloneFile(snap, clone, want, spec); err != nil {
			return "", nil, err
		}
		return clone, func() { os.Remove(clone) }, nil
	}
	return h.cloneVolume(ctx, *snap.Volume, want, spec)
}

// cloneVolume clones the snapshot volume on the host, checks the clone's
// head and writes the restored domain's XML into it.
func (h *Host) cloneVolume(ctx context.Context, snap VolumeSnapshot, want *libvirtxml.Domain, spec DomainSpec) (string, func(), error) {
	name := snap.Volume + RestoreSuffix + spec.ID
	if !validVolName.MatchString(name) {
		return "", nil, fmt.Errorf("%w: snapshot volume name %q", ErrInvalid, snap.Volume)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return "", nil, err
	}
	src, err := xfer.pool.LookupStorageVolByName(snap.Volume)
	if err != nil {
		xfer.close()
		if libvirtCode(err) == libvirt.ERR_NO_STORAGE_VOL {
			return "", nil, fmt.Errorf("%w: volume %s is gone", ErrSnapshotCorrupt, snap.Volume)
		}
		return "", nil, classify(err)
	}
	defer src.Free()
	info, err := src.GetInfo()
	if err != nil {
		xfer.close()
		return "", nil, classify(err)
	}
	if int64(info.Capacity) != snap.Size {
		xfer.close()
		return "", nil, fmt.Errorf("%w: volume %s is %d bytes; was saved as %d", ErrSnapshotCorrupt, snap.Volume, info.Capacity, snap.Size)
	}
	def := libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: uint64(snap.Size)},
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "raw"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"},
		},
	}
	doc, err := def.Marshal()
	if err != nil {
		xfer.close()
		return "", nil, fmt.Errorf("clone volume definition: %w", err)
	}
	clone, err := xfer.pool.StorageVolCreateXMLFrom(doc, src, 0)
	if err != nil {
		xfer.close()
		return "", nil, fmt.Errorf("clone snapshot volume %s: %w", snap.Volume, classify(err))
	}
	remove := func() {
		if err := clone.Delete(0); err != nil && libvirtCode(err) != libvirt.ERR_NO_STORAGE_VOL {
			h.log.Warn("delete snapshot clone", "volume", name, "uri", h.cfg.URI, "err", err)
		}
		clone.Free()
		xfer.close()
	}
	path, err := h.prepareClone(ctx, xfer, clone, snap, want, spec)
	if err != nil {
		remove()
		return "", nil, err
	}
	return path, remove, nil
}

func (h *Host) prepareClone(ctx context.Context, xfer *transfer, clone *libvirt.StorageVol, snap VolumeSnapshot, want *libvirtxml.Domain, spec DomainSpec) (string, error) {
	head, hdr, err := xfer.readHead(ctx, clone, snap.Size)
	if err != nil {
		return "", err
	}
	if sum := sha256.Sum256(head); int64(len(head)) != snap.HeadLen || hex.EncodeToString(sum[:]) != snap.HeadSHA256 {
		return "", fmt.Errorf("%w: the head of %s (%d bytes) hashes to %x; want %d bytes, %s", ErrSnapshotCorrupt, snap.Volume, len(head), sum, snap.HeadLen, snap.HeadSHA256)
	}
	saved, err := hdr.domain(bytes.NewReader(head))
	if err != nil {
		return "", err
	}
	if err := matchSnapshot(saved, want); err != nil {
		return "", err
	}
	xml, err := restoredXML(saved, want, spec, hdr)
	if err != nil {
		return "", err
	}
	if err := xfer.write(clone, saveHeaderLen, xml); err != nil {
		return "", fmt.Errorf("write the restored domain into the clone: %w", err)
	}
	path, err := clone.GetPath()
	if err != nil {
		return "", classify(err)
	}
	return path, nil
}

// ReadVolume downloads the pool's volume name, of at most max bytes
// (ErrNotFound when there is none).
func (h *Host) ReadVolume(ctx context.Context, name string, max int64) ([]byte, error) {
	wrap := func(err error) error { return fmt.Errorf("read volume %s on %s: %w", name, h.cfg.URI, err) }
	if err := h.EnsurePool(ctx); err != nil {
		return nil, wrap(err)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	defer xfer.close()
	v, err := xfer.pool.LookupStorageVolByName(name)
	if libvirtCode(err) == libvirt.ERR_NO_STORAGE_VOL {
		return nil, wrap(fmt.Errorf("%w: no volume %s", ErrNotFound, name))
	}
	if err != nil {
		return nil, wrap(classify(err))
	}
	defer v.Free()
	info, err := v.GetInfo()
	if err != nil {
		return nil, wrap(classify(err))
	}
	if int64(info.Capacity) > max {
		return nil, wrap(fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, info.Capacity, max))
	}
	b, err := xfer.read(ctx, v, 0, int64(info.Capacity))
	if err != nil {
		return nil, wrap(err)
	}
	return b, nil
}

// WriteVolume creates the pool's volume name holding b, whole or not at
// all: written to a temporary volume, then copied by libvirt to name. A
// volume of that name already there is ErrConflict.
func (h *Host) WriteVolume(ctx context.Context, name string, b []byte) error {
	wrap := func(err error) error { return fmt.Errorf("write volume %s on %s: %w", name, h.cfg.URI, err) }
	if !validVolName.MatchString(name) {
		return wrap(fmt.Errorf("%w: bad volume name", ErrInvalid))
	}
	if err := h.EnsurePool(ctx); err != nil {
		return wrap(err)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return wrap(err)
	}
	defer xfer.close()
	part := name + ".part-" + randomHex(16)
	doc, err := volumeXML(part, uint64(len(b)))
	if err != nil {
		return wrap(err)
	}
	tmp, err := xfer.pool.StorageVolCreateXML(doc, 0)
	if err != nil {
		return wrap(classify(err))
	}
	defer func() {
		if err := tmp.Delete(0); err != nil {
			h.log.Warn("delete temporary volume", "volume", part, "err", err)
		}
		tmp.Free()
	}()
	if err := xfer.write(tmp, 0, b); err != nil {
		return wrap(err)
	}
	if doc, err = volumeXML(name, uint64(len(b))); err != nil {
		return wrap(err)
	}
	final, err := xfer.pool.StorageVolCreateXMLFrom(doc, tmp, 0)
	if err != nil {
		if v, lerr := xfer.pool.LookupStorageVolByName(name); lerr == nil {
			v.Free()
			return wrap(fmt.Errorf("%w: volume exists", ErrConflict))
		}
		return wrap(classify(err))
	}
	final.Free()
	return nil
}
