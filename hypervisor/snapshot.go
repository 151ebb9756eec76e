package hypervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Memory snapshots (snapshot.go). SaveSnapshot writes a running domain's
// memory and device state to a file with libvirt's own save
// (virDomainSaveFlags; the domain ends). Restore starts a NEW domain from
// it, with its own name, UUID and metadata and the same devices.
//
// libvirt's restore (virDomainRestoreFlags) insists, in its ABI check of a
// replacement XML, that the restored domain keeps the saved UUID, so two VMs
// restored from one file would collide. Restore therefore clones the file
// per restore and rewrites the domain XML in the clone's header (name,
// UUID, metadata, console), which libvirt then restores without an ABI
// check: the devices are the saved ones, byte for byte, but for writable
// disks, which are the restored VM's own (the spec's file at the saved
// target; the caller gives it a copy of the saved one's content). The
// clone is read once (hashed against the snapshot's sum on the way, so a
// damaged file is refused before any QEMU sees it) and removed as soon as
// libvirt has loaded it. PrepareSnapshot makes that copy ahead of time
// (Snapshot.Prepared), so a restore only renames it and rewrites the
// header. QEMU's `-incoming exec:` straight from the shared file would
// skip the copy, but libvirt runs QEMU with `-sandbox spawn=deny`.
//
// The file is libvirt's save format: a 92-byte header (magic
// "LibvirtQemudSave", version, data length, was-running, compressed,
// cookie offset, unused words), the NUL-terminated domain XML, libvirt's
// cookie, then QEMU's migration stream ("QEVM"...).
//
// The snapshot's path is read by this process and by libvirtd alike; a
// snapshot on a host whose disk this process does not see is a volume of
// its pool instead (Snapshot.Volume, snapshot_remote.go).

// Save-file layout (libvirt 9 src/qemu/qemu_saveimage.h, virQEMUSaveHeader).
const (
	saveMagic          = "LibvirtQemudSave"
	saveHeaderLen      = 92
	saveDataLenOffset  = 20 // uint32s in host byte order (little-endian here)
	saveCompressedOff  = 28
	saveCookieOffsetAt = 32
	qemuStreamMagic    = "QEVM"
)

// Snapshot errors, wrapped with the detail.
var (
	// ErrSnapshotCorrupt: the file is not a whole, unaltered snapshot.
	ErrSnapshotCorrupt = errors.New("snapshot corrupt")
	// ErrSnapshotMismatch: the snapshot was saved from a domain unlike the
	// spec (memory, vCPUs, type, kernel, command line or disks differ).
	ErrSnapshotMismatch = errors.New("snapshot does not match the spec")
)

// snapshotRoom is the description a saved domain carries: 4 KiB that the
// restored domain's XML may use.
var snapshotRoom = "stockade memory snapshot " + strings.Repeat("-", 4096)

// snapshotPathRE keeps snapshot paths plain.
var snapshotPathRE = regexp.MustCompile(`^/[A-Za-z0-9/._+-]{1,1000}$`)

// Snapshot names a saved domain's file and the SHA-256 of its bytes.
type Snapshot struct {
	Path   string
	SHA256 string // hex; Restore refuses a file that does not hash to it
	// Prepared, when set, is a copy of Path that PrepareSnapshot made (and
	// checked against SHA256): Restore takes it (renames it) instead of
	// copying Path on demand. It is gone after Restore, whatever happens.
	Prepared string
	// Volume, when set, is the snapshot as a volume of the host's pool
	// (a host this process cannot see the disk of; snapshot_remote.go);
	// Path is then its path on the host and SHA256 unused.
	Volume *VolumeSnapshot
}

// PrepareSnapshot copies snap to dst ahead of a restore (Snapshot.Prepared),
// checking the copy's bytes against snap's sum; a failed copy leaves no
// file.
func (h *Host) PrepareSnapshot(ctx context.Context, snap Snapshot, dst string) error {
	if !snapshotPathRE.MatchString(snap.Path) || !snapshotPathRE.MatchString(dst) {
		return fmt.Errorf("prepare snapshot: %w: paths %q, %q must be absolute, of [A-Za-z0-9/._+-]", ErrInvalid, snap.Path, dst)
	}
	if err := h.copySnapshot(snap, dst); err != nil {
		return fmt.Errorf("prepare snapshot %s: %w", snap.Path, err)
	}
	return nil
}

// SaveSnapshot saves our running domain id to path; the domain ends (it is
// transient: libvirt forgets it). The guest must hold nothing specific to
// that VM that its restored copies must not share.
func (h *Host) SaveSnapshot(ctx context.Context, id, path string) error {
	if !snapshotPathRE.MatchString(path) {
		return fmt.Errorf("save vm %s: %w: snapshot path %q must be absolute, of [A-Za-z0-9/._+-]", id, ErrInvalid, path)
	}
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("save vm %s: %w", id, err)
	}
	defer release()
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return fmt.Errorf("save vm %s: %w", id, err)
	}
	defer dom.Free()
	// The saved XML carries a description of padding: room for Restore to
	// write a restored domain's identity (and whatever its XML encoder
	// spells longer) into a clone's header.
	x, err := dom.GetXMLDesc(libvirt.DOMAIN_XML_SECURE | libvirt.DOMAIN_XML_MIGRATABLE)
	if err != nil {
		return fmt.Errorf("save vm %s: %w", id, h.fail(err))
	}
	var def libvirtxml.Domain
	if err := def.Unmarshal(x); err != nil {
		return fmt.Errorf("save vm %s: parse domain xml: %w", id, err)
	}
	def.Description = snapshotRoom
	dxml, err := def.Marshal()
	if err != nil {
		return fmt.Errorf("save vm %s: marshal domain xml: %w", id, err)
	}
	if err := dom.SaveFlags(path, dxml, libvirt.DOMAIN_SAVE_RUNNING); err != nil {
		return fmt.Errorf("save vm %s to %s: %w", id, path, h.fail(err))
	}
	h.removeLog(id)
	return nil
}

// Restore creates a domain for spec (its ID, TenantID and ConsoleLog; the
// rest must match what the snapshot was saved from, or ErrSnapshotMismatch)
// whose guest resumes from snap. Like Create it is transient and an
// existing domain with the same name is ErrConflict; a damaged file is
// ErrSnapshotCorrupt and nothing is started.
func (h *Host) Restore(ctx context.Context, spec DomainSpec, snap Snapshot) (*Domain, error) {
	d, err := h.restore(ctx, spec, snap)
	if err != nil {
		return nil, fmt.Errorf("restore vm %s: %w", spec.ID, err)
	}
	return d, nil
}

func (h *Host) restore(ctx context.Context, spec DomainSpec, snap Snapshot) (*Domain, error) {
	if !snapshotPathRE.MatchString(snap.Path) {
		return nil, fmt.Errorf("%w: snapshot path %q must be absolute, of [A-Za-z0-9/._+-]", ErrInvalid, snap.Path)
	}
	switch spec.InstallationID {
	case "":
		spec.InstallationID = h.cfg.InstallationID
	case h.cfg.InstallationID:
	default:
		return nil, fmt.Errorf("%w: installation %q is not this host's %q", ErrInvalid, spec.InstallationID, h.cfg.InstallationID)
	}
	if spec.Type == "" {
		t, err := h.DomainType(ctx)
		if err != nil {
			return nil, err
		}
		spec.Type = t
	}
	want, err := BuildDomain(spec)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	clone, removeClone, err := h.cloneFor(ctx, snap, want, spec) // snapshot_remote.go
	if err != nil {
		return nil, err
	}
	defer removeClone()
	tClone := time.Since(t0)

	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	name := DomainName(spec.ID)
	if dom, err := s.conn.LookupDomainByName(name); err == nil {
		dom.Free()
		return nil, fmt.Errorf("%w: domain %s exists", ErrConflict, name)
	} else if libvirtCode(err) != libvirt.ERR_NO_DOMAIN {
		return nil, h.fail(err)
	}
	h.known.put(name, identity{ID: spec.ID, TenantID: spec.TenantID, InstallationID: spec.InstallationID})
	t1 := time.Now()
	if err := s.conn.DomainRestoreFlags(clone, "", libvirt.DOMAIN_SAVE_RUNNING); err != nil {
		cerr := h.fail(err)
		if other, lerr := s.conn.LookupDomainByName(name); lerr == nil {
			other.Free()
			return nil, fmt.Errorf("%w: %w", ErrConflict, err)
		}
		h.known.forget(name)
		h.removeLog(spec.ID)
		return nil, cerr
	}
	dom, err := s.conn.LookupDomainByName(name)
	if err != nil {
		return nil, fmt.Errorf("look up restored domain: %w", h.fail(err))
	}
	defer dom.Free()
	uuid, err := dom.GetUUIDString()
	if err != nil {
		_ = dom.Destroy()
		return nil, fmt.Errorf("read uuid: %w", h.fail(err))
	}
	h.log.Debug("vm restored", "vm", spec.ID, "clone", tClone.Round(time.Millisecond),
		"libvirt_restore", time.Since(t1).Round(time.Millisecond))
	return &Domain{ID: spec.ID, TenantID: spec.TenantID, Name: name, UUID: uuid}, nil
}

// cloneFile makes the local clone a restore of spec loads from snap: the
// prepared copy (Snapshot.Prepared) taken, else a checked copy of
// snap.Path; with the restored domain's XML in its header.
func (h *Host) cloneFile(snap Snapshot, clone string, want *libvirtxml.Domain, spec DomainSpec) error {
	if snap.Prepared != "" {
		defer os.Remove(snap.Prepared)
		if !snapshotPathRE.MatchString(snap.Prepared) {
			return fmt.Errorf("%w: prepared snapshot path %q must be absolute, of [A-Za-z0-9/._+-]", ErrInvalid, snap.Prepared)
		}
		if err := os.Rename(snap.Prepared, clone); err != nil {
			return fmt.Errorf("take prepared snapshot: %w", err)
		}
	} else if err := h.copySnapshot(snap, clone); err != nil {
		return err
	}
	if err := rewriteClone(clone, want, spec); err != nil {
		os.Remove(clone)
		return err
	}
	return nil
}

// fileStamp is what changes when a file is written or replaced.
type fileStamp struct {
	ino, size, mtime, ctime int64
	sum                     string
}

func stampOf(st os.FileInfo, sum string) fileStamp {
	fs := fileStamp{size: st.Size(), mtime: st.ModTime().UnixNano(), sum: sum}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino, fs.ctime = int64(sys.Ino), sys.Ctim.Nano()
	}
	return fs
}

// copySnapshot copies snap to dst. The copy is hashed against snap's sum
// unless the file is unchanged since it last hashed right (same inode,
// size, mtime, ctime); a failed copy leaves no file.
func (h *Host) copySnapshot(snap Snapshot, dst string) (err error) {
	src, err := os.Open(snap.Path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotCorrupt, err)
	}
	if _, err := CheckSnapshot(src, st.Size()); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("clone snapshot: %w", cerr)
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	stamp := stampOf(st, snap.SHA256)
	if v, ok := h.verified.Load(snap.Path); ok && v.(fileStamp) == stamp {
		// Known good: a plain copy, which the kernel does (copy_file_range).
		if n, err := io.Copy(out, src); err != nil || n != st.Size() {
			return fmt.Errorf("clone snapshot: copied %d of %d bytes: %w", n, st.Size(), err)
		}
		return nil
	}
	sum := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, sum), src, make([]byte, 1<<20))
	if err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); n != st.Size() || got != snap.SHA256 {
		h.verified.Delete(snap.Path)
		return fmt.Errorf("%w: %s hashes to %s; want %s", ErrSnapshotCorrupt, snap.Path, got, snap.SHA256)
	}
	if st2, err := src.Stat(); err == nil && stampOf(st2, snap.SHA256) == stamp {
		h.verified.Store(snap.Path, stamp)
	}
	return nil
}

// rewriteClone checks a clone's saved domain against want and rewrites the
// domain XML in its header for spec.
func rewriteClone(path string, want *libvirtxml.Domain, spec DomainSpec) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	hdr, err := CheckSnapshot(f, st.Size())
	if err != nil {
		return err
	}
	saved, err := hdr.domain(f)
	if err != nil {
		return err
	}
	if err := matchSnapshot(saved, want); err != nil {
		return err
	}
	xml, err := restoredXML(saved, want, spec, hdr)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(xml, saveHeaderLen); err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("clone snapshot: %w", err)
	}
	return nil
}

// SnapshotHeader is what CheckSnapshot reads of a save file.
type SnapshotHeader struct {
	XMLLen       int64 // bytes of the NUL-terminated domain XML after the header
	StreamOffset int64 // where QEMU's migration stream starts
}

// CheckSnapshot checks that r (a save file of size bytes) is an
// uncompressed libvirt save file with a QEMU migration stream where its
// header says.
func CheckSnapshot(r io.ReaderAt, size int64) (SnapshotHeader, error) {
	var hdr [saveHeaderLen]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return SnapshotHeader{}, fmt.Errorf("%w: read header: %w", ErrSnapshotCorrupt, err)
	}
	if string(hdr[:len(saveMagic)]) != saveMagic {
		return SnapshotHeader{}, fmt.Errorf("%w: not a libvirt save file", ErrSnapshotCorrupt)
	}
	if c := binary.LittleEndian.Uint32(hdr[saveCompressedOff:]); c != 0 {
		return SnapshotHeader{}, fmt.Errorf("%w: compressed (format %d); restore reads raw streams only", ErrSnapshotCorrupt, c)
	}
	n := int64(binary.LittleEndian.Uint32(hdr[saveDataLenOffset:]))
	xmlLen := int64(binary.LittleEndian.Uint32(hdr[saveCookieOffsetAt:]))
	if xmlLen == 0 || xmlLen > n {
		xmlLen = n // no cookie
	}
	off := saveHeaderLen + n
	if off+int64(len(qemuStreamMagic)) > size {
		return SnapshotHeader{}, fmt.Errorf("%w: truncated (xml of %d bytes, file of %d)", ErrSnapshotCorrupt, n, size)
	}
	var magic [len(qemuStreamMagic)]byte
	if _, err := r.ReadAt(magic[:], off); err != nil {
		return SnapshotHeader{}, fmt.Errorf("%w: read stream: %w", ErrSnapshotCorrupt, err)
	}
	if string(magic[:]) != qemuStreamMagic {
		return SnapshotHeader{}, fmt.Errorf("%w: no QEMU stream at byte %d", ErrSnapshotCorrupt, off)
	}
	return SnapshotHeader{XMLLen: xmlLen, StreamOffset: off}, nil
}

// domain parses the domain XML in the header.
func (hdr SnapshotHeader) domain(r io.ReaderAt) (*libvirtxml.Domain, error) {
	b := make([]byte, hdr.XMLLen)
	if _, err := r.ReadAt(b, saveHeaderLen); err != nil {
		return nil, fmt.Errorf("%w: read domain xml: %w", ErrSnapshotCorrupt, err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(bytes.TrimRight(b, "\x00"))); err != nil {
		return nil, fmt.Errorf("%w: domain xml: %w", ErrSnapshotCorrupt, err)
	}
	return &d, nil
}

// matchSnapshot reports how the saved domain differs from want in what the
// guest's memory depends on.
func matchSnapshot(saved, want *libvirtxml.Domain) error {
	var diffs []string
	cmp := func(what string, a, b any) {
		if a != b {
			diffs = append(diffs, fmt.Sprintf("%s %v, spec %v", what, a, b))
		}
	}
	cmp("type", saved.Type, want.Type)
	if saved.Memory != nil && want.Memory != nil {
		cmp("memory KiB", memKiB(saved.Memory), memKiB(want.Memory))
	}
	if saved.VCPU != nil && want.VCPU != nil {
		cmp("vcpus", saved.VCPU.Value, want.VCPU.Value)
	}
	if saved.OS != nil && want.OS != nil {
		cmp("kernel", saved.OS.Kernel, want.OS.Kernel)
		cmp("initramfs", saved.OS.Initrd, want.OS.Initrd)
		cmp("cmdline", saved.OS.Cmdline, want.OS.Cmdline)
	}
	cmp("disks", diskList(saved), diskList(want))
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s", ErrSnapshotMismatch, strings.Join(diffs, "; "))
	}
	return nil
}

func memKiB(m *libvirtxml.DomainMemory) uint {
	switch strings.ToLower(m.Unit) {
	case "mib", "m":
		return m.Value << 10
	case "gib", "g":
		return m.Value << 20
	case "b", "bytes":
		return m.Value >> 10
	}
	return m.Value // KiB, libvirt's default
}

func diskList(d *libvirtxml.Domain) string {
	if d.Devices == nil {
		return ""
	}
	var out []string
	for _, disk := range d.Devices.Disks {
		p := ""
		if disk.Source != nil && disk.Source.File != nil {
			p = disk.Source.File.File
		}
		t := ""
		if disk.Target != nil {
			t = disk.Target.Dev
		}
		if disk.ReadOnly == nil {
			// A writable disk is the VM's own: the spec's replaces the
			// saved one at its target (restoredXML), and its caller
			// gives it a copy of the saved one's content.
			p = "(own)"
		}
		out = append(out, fmt.Sprintf("%s=%s(ro=%t)", t, p, disk.ReadOnly != nil))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// writablePath is the file of d's writable disk at target dev.
func writablePath(d *libvirtxml.Domain, dev string) (string, bool) {
	if d.Devices == nil {
		return "", false
	}
	for _, dk := range d.Devices.Disks {
		if dk.Target != nil && dk.Target.Dev == dev && dk.ReadOnly == nil && dk.Source != nil && dk.Source.File != nil {
			return dk.Source.File.File, true
		}
	}
	return "", false
}

// restoredXML is saved with spec's identity, padded with spaces to the
// header's XML length (it must not be longer: the cookie follows it).
func restoredXML(saved, want *libvirtxml.Domain, spec DomainSpec, hdr SnapshotHeader) ([]byte, error) {
	d := *saved
	meta, err := marshalMetadata(identity{ID: spec.ID, TenantID: spec.TenantID, InstallationID: spec.InstallationID})
	if err != nil {
		return nil, err
	}
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return nil, fmt.Errorf("new uuid: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	d.Name = DomainName(spec.ID)
	d.UUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	d.Metadata = &libvirtxml.DomainMetadata{XML: meta}
	d.ID = nil
	d.Description = ""
	if d.Devices != nil {
		devs := *d.Devices
		// The serial console: the spec's file, else a pty.
		devs.Serials = slices.Clone(devs.Serials)
		for i := range devs.Serials {
			sr := devs.Serials[i]
			if spec.ConsoleLog != "" {
				sr.Source = &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: spec.ConsoleLog, Append: "off"}}
			} else {
				sr.Source = &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}}
			}
			devs.Serials[i] = sr
		}
		devs.Consoles = nil // libvirt derives the console from the serial
		// Writable disks: the spec's file at the same target.
		devs.Disks = slices.Clone(devs.Disks)
		for i := range devs.Disks {
			dk := devs.Disks[i]
			if dk.ReadOnly != nil || dk.Target == nil {
				continue
			}
			p, ok := writablePath(want, dk.Target.Dev)
			if !ok {
				return nil, fmt.Errorf("%w: no disk at %s in the spec", ErrSnapshotMismatch, dk.Target.Dev)
			}
			dk.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: p}}
			devs.Disks[i] = dk
		}
		// Channel sockets: libvirt picks a fresh path per domain.
		devs.Channels = slices.Clone(devs.Channels)
		for i := range devs.Channels {
			c := devs.Channels[i]
			if c.Source != nil && c.Source.UNIX != nil {
				c.Source = &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: c.Source.UNIX.Mode}}
			}
			devs.Channels[i] = c
		}
		d.Devices = &devs
	}
	s, err := d.Marshal()
	if err != nil {
		return nil, fmt.Errorf("marshal restored domain: %w", err)
	}
	room := int(hdr.XMLLen) - 1 // the NUL stays
	if len(s) > room {
		return nil, fmt.Errorf("%w: the restored domain's xml (%d bytes) does not fit the saved one's (%d)", ErrSnapshotMismatch, len(s), room)
	}
	return append([]byte(s), bytes.Repeat([]byte{' '}, room-len(s))...), nil
}
