package hypervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Uploads (storage_upload.go). EnsureVolume puts a local file on the host
// under its content name: uploaded to a temporary volume
// ("<name>.part-<random>") with a sparse stream (holes are not sent: a
// 700 MiB template of which 400 MiB is written sends 400 MiB), checked by
// downloading it back and hashing it, then copied by libvirt to the final
// name, which never holds a half-written file: of two replicas uploading
// at once, the first copy wins and the other drops its part. A volume
// already there is trusted only once this process has downloaded and
// hashed it (once per process and host: a few seconds per GiB, against a
// boot from a corrupt template). A mismatch deletes it and uploads again.

// ErrChecksum: a volume's content is not the SHA-256 it is named for.
var ErrChecksum = errors.New("volume checksum mismatch")

// progressEvery is how often a transfer logs its bytes done.
const progressEvery = 5 * time.Second

// EnsureVolume makes sure the pool holds the local file localPath, whose
// SHA-256 is sha256Hex, as the volume called name, and returns its path on
// the host. It is idempotent and safe when several callers (in this
// process or other replicas) ensure the same name at once.
func (h *Host) EnsureVolume(ctx context.Context, name, localPath, sha256Hex string) (string, error) {
	if !validVolName.MatchString(name) || !validSHA256.MatchString(sha256Hex) {
		return "", fmt.Errorf("ensure volume %q: %w: bad name or sha256 %q", name, ErrInvalid, sha256Hex)
	}
	fi, err := os.Stat(localPath)
	if err != nil {
		return "", fmt.Errorf("ensure volume %s: %w", name, err)
	}
	size := uint64(fi.Size())
	if p, ok := h.knownVolume(ctx, name, size); ok {
		return p, nil
	}
	for {
		h.store.mu.Lock()
		if u := h.store.inflight[name]; u != nil {
			h.store.mu.Unlock()
			select {
			case <-u.done:
				if u.err != nil {
					return "", u.err
				}
				continue // check again: it may have been deleted since
			case <-ctx.Done():
				return "", fmt.Errorf("ensure volume %s: %w", name, ctx.Err())
			}
		}
		u := &upload{done: make(chan struct{})}
		h.store.inflight[name] = u
		h.store.mu.Unlock()
		u.path, u.err = h.ensureVolume(ctx, name, localPath, sha256Hex, size)
		h.store.mu.Lock()
		delete(h.store.inflight, name)
		if u.err == nil {
			h.store.verified[name] = size
		}
		h.store.mu.Unlock()
		close(u.done)
		return u.path, u.err
	}
}

// knownVolume is the fast path of a boot: a volume this process verified,
// still there with its size, looked up on the control connection.
func (h *Host) knownVolume(ctx context.Context, name string, size uint64) (string, bool) {
	h.store.mu.Lock()
	known, ok := h.store.verified[name]
	h.store.mu.Unlock()
	if !ok || known != size {
		return "", false
	}
	var path string
	err := h.withPool(ctx, func(pool *libvirt.StoragePool) error {
		v, err := pool.LookupStorageVolByName(name)
		if err != nil {
			return err
		}
		defer v.Free()
		info, err := v.GetInfo()
		if err != nil {
			return err
		}
		if info.Capacity != size {
			return fmt.Errorf("%w: volume %s changed size", ErrConflict, name)
		}
		path, err = v.GetPath()
		return err
	})
	return path, err == nil
}

func (h *Host) ensureVolume(ctx context.Context, name, localPath, sum string, size uint64) (string, error) {
	wrap := func(err error) error { return fmt.Errorf("ensure volume %s on %s: %w", name, h.cfg.URI, err) }
	if err := h.EnsurePool(ctx); err != nil {
		return "", wrap(err)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return "", wrap(err)
	}
	defer xfer.close()
	for attempt := 0; ; attempt++ {
		path, state, err := xfer.check(ctx, h, name, sum, size)
		if err != nil {
			return "", wrap(err)
		}
		switch state {
		case volGood:
			return path, nil
		case volBusy: // another replica's copy is being written
			if attempt > 120 {
				return "", wrap(fmt.Errorf("%w: still being written after 2 min", ErrConflict))
			}
			select {
			case <-ctx.Done():
				return "", wrap(ctx.Err())
			case <-time.After(time.Second):
			}
			continue
		case volBad:
			h.log.Warn("volume on the host is corrupt: deleting it to upload it again", "volume", name, "uri", h.cfg.URI)
			if err := deleteVol(xfer.pool, name); err != nil {
				return "", wrap(err)
			}
		}
		if attempt > 3 {
			return "", wrap(errors.New("gave up after 3 uploads"))
		}
		if err := xfer.upload(ctx, h, name, localPath, sum, size); err != nil {
			return "", wrap(err)
		}
	}
}

type volState int

const (
	volMissing volState = iota
	volGood
	volBusy
	volBad
)

// transfer is a libvirt connection of its own for one volume's upload or
// download: GiBs through the control connection would delay every other
// call (and its keepalive) behind them.
type transfer struct {
	conn *libvirt.Connect
	pool *libvirt.StoragePool
}

func (h *Host) openTransfer(ctx context.Context) (*transfer, error) {
	conn, err := h.dial(ctx)
	if err != nil {
		return nil, err
	}
	pool, err := conn.LookupStoragePoolByName(PoolName(h.cfg.InstallationID))
	if err != nil {
		conn.Close()
		return nil, classify(err)
	}
	return &transfer{conn: conn, pool: pool}, nil
}

func (x *transfer) close() {
	x.pool.Free()
	x.conn.Close()
}

// check tells what the final volume is: missing, good (its size right and
// its checksum verified, by this process once), being written, or bad.
func (x *transfer) check(ctx context.Context, h *Host, name, sum string, size uint64) (string, volState, error) {
	v, err := x.pool.LookupStorageVolByName(name)
	if libvirtCode(err) == libvirt.ERR_NO_STORAGE_VOL {
		return "", volMissing, nil
	}
	if err != nil {
		return "", 0, classify(err)
	}
	defer v.Free()
	path, err := v.GetPath()
	if err != nil {
		return "", 0, classify(err)
	}
	info, err := v.GetInfo()
	if err != nil {
		return "", 0, classify(err)
	}
	if info.Capacity != size {
		return path, volBad, nil
	}
	h.store.mu.Lock()
	known, ok := h.store.verified[name]
	h.store.mu.Unlock()
	if ok && known == size {
		return path, volGood, nil
	}
	got, err := x.hash(ctx, h, v, name, size)
	if libvirtCode(err) == libvirt.ERR_OPERATION_INVALID {
		return path, volBusy, nil // "still being allocated"
	}
	if err != nil {
		return "", 0, err
	}
	if got != sum {
		h.log.Warn("volume checksum mismatch", "volume", name, "uri", h.cfg.URI, "sha256", got, "want", sum)
		return path, volBad, nil
	}
	return path, volGood, nil
}

// upload sends the local file to a temporary volume, verifies it and
// copies it to the final name (a name another replica took meanwhile is
// theirs: ours is dropped).
func (x *transfer) upload(ctx context.Context, h *Host, name, localPath, sum string, size uint64) error {
	part := name + ".part-" + randomHex(16)
	tmp, err := x.createAndUpload(ctx, h, part, localPath, size)
	if err != nil {
		return err
	}
	defer func() {
		if err := deleteVol(x.pool, part); err != nil {
			h.log.Warn("delete temporary volume", "volume", part, "err", err)
		}
		tmp.Free()
	}()
	got, err := x.hash(ctx, h, tmp, part, size)
	if err != nil {
		return err
	}
	if got != sum {
		return fmt.Errorf("%w: uploaded %s reads back as sha256 %s, want %s", ErrChecksum, localPath, got, sum)
	}
	doc, err := volumeXML(name, size)
	if err != nil {
		return err
	}
	final, err := x.pool.StorageVolCreateXMLFrom(doc, tmp, 0)
	if err != nil {
		// ERR_STORAGE_VOL_EXIST, or "already in use" when both copies
		// were added at once: another replica's; check verifies it.
		if v, lerr := x.pool.LookupStorageVolByName(name); lerr == nil {
			v.Free()
			return nil
		}

		return fmt.Errorf("copy %s to %s: %w", part, name, classify(err))
	}
	final.Free()
	h.store.mu.Lock()
	h.store.verified[name] = size // copied by libvirt from what we just hashed
	h.store.mu.Unlock()
	h.log.Info("volume uploaded", "volume", name, "uri", h.cfg.URI, "bytes", size)
	return nil
}

// UploadVolume creates the volume name (sparse) on the host with the local
// file's content and returns its path; a volume of that name already
// there is ErrConflict. Used for per-VM files (scratch disks): nothing
// shares them, they are not checksummed, a failed upload leaves no volume.
func (h *Host) UploadVolume(ctx context.Context, name, localPath string) (string, error) {
	wrap := func(err error) error { return fmt.Errorf("upload volume %s to %s: %w", name, h.cfg.URI, err) }
	if !validVolName.MatchString(name) {
		return "", wrap(fmt.Errorf("%w: bad volume name", ErrInvalid))
	}
	fi, err := os.Stat(localPath)
	if err != nil {
		return "", wrap(err)
	}
	if err := h.EnsurePool(ctx); err != nil {
		return "", wrap(err)
	}
	xfer, err := h.openTransfer(ctx)
	if err != nil {
		return "", wrap(err)
	}
	defer xfer.close()
	v, err := xfer.createAndUpload(ctx, h, name, localPath, uint64(fi.Size()))
	if err != nil {
		return "", wrap(err)
	}
	defer v.Free()
	path, err := v.GetPath()
	if err != nil {
		return "", wrap(classify(err))
	}
	return path, nil
}

func volumeXML(name string, size uint64) (string, error) {
	def := libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: size},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0}, // sparse
		Target: &libvirtxml.StorageVolumeTarget{
			Format:      &libvirtxml.StorageVolumeTargetFormat{Type: "raw"},
			Permissions: &libvirtxml.StorageVolumeTargetPermissions{Mode: "0644"},
		},
	}
	doc, err := def.Marshal()
	if err != nil {
		return "", fmt.Errorf("volume definition: %w", err)
	}
	return doc, nil
}

// createAndUpload creates the volume and fills it from the local file; on
// failure the volume is deleted again.
func (x *transfer) createAndUpload(ctx context.Context, h *Host, name, localPath string, size uint64) (*libvirt.StorageVol, error) {
	doc, err := volumeXML(name, size)
	if err != nil {
		return nil, err
	}
	v, err := x.pool.StorageVolCreateXML(doc, 0)
	if libvirtCode(err) == libvirt.ERR_STORAGE_VOL_EXIST {
		return nil, fmt.Errorf("%w: volume %s exists: %w", ErrConflict, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, classify(err))
	}
	if err := x.send(ctx, h, v, name, localPath, size); err != nil {
		if derr := v.Delete(0); derr != nil {
			h.log.Warn("delete half-uploaded volume", "volume", name, "err", derr)
		}
		v.Free()
		return nil, err
	}
	return v, nil
}

// send uploads the local file into v through a sparse stream.
func (x *transfer) send(ctx context.Context, h *Host, v *libvirt.StorageVol, name, localPath string, size uint64) error {
	f, err := os.Open(localPath)
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, err)
	}
	defer f.Close()
	st, err := x.conn.NewStream(0)
	if err != nil {
		return fmt.Errorf("upload %s: %w", name, classify(err))
	}
	defer st.Free()
	if err := v.Upload(st, 0, size, libvirt.STORAGE_VOL_UPLOAD_SPARSE_STREAM); err != nil {
		return fmt.Errorf("upload %s: %w", name, classify(err))
	}
	src := &sparseSource{f: f, size: int64(size), progress: newProgress(h, "upload", name, size)}
	if err := st.SparseSendAll(src.data(ctx), src.hole, src.skip); err != nil {
		_ = st.Abort()
		if ctx.Err() != nil {
			return fmt.Errorf("upload %s: %w", name, ctx.Err())
		}
		if src.err != nil {
			return fmt.Errorf("upload %s: %w", name, src.err)
		}
		return fmt.Errorf("upload %s: %w", name, classify(err))
	}
	if err := st.Finish(); err != nil {
		return fmt.Errorf("upload %s: finish: %w", name, classify(err))
	}
	src.progress.end()
	return nil
}

// hash downloads v through a sparse stream and returns its SHA-256 (holes
// hashed as the zeros they read as).
func (x *transfer) hash(ctx context.Context, h *Host, v *libvirt.StorageVol, name string, size uint64) (string, error) {
	st, err := x.conn.NewStream(0)
	if err != nil {
		return "", fmt.Errorf("verify %s: %w", name, classify(err))
	}
	defer st.Free()
	if err := v.Download(st, 0, size, libvirt.STORAGE_VOL_DOWNLOAD_SPARSE_STREAM); err != nil {
		return "", fmt.Errorf("verify %s: %w", name, err) // unclassified: check reads ERR_OPERATION_INVALID
	}
	sink := &hashSink{h: sha256.New(), progress: newProgress(h, "verify", name, size)}
	err = st.SparseRecvAll(func(_ *libvirt.Stream, b []byte) (int, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		sink.h.Write(b)
		sink.progress.add(int64(len(b)))
		return len(b), nil
	}, sink.hole)
	if err != nil {
		_ = st.Abort()
		if ctx.Err() != nil {
			return "", fmt.Errorf("verify %s: %w", name, ctx.Err())
		}
		return "", fmt.Errorf("verify %s: %w", name, classify(err))
	}
	if err := st.Finish(); err != nil {
		return "", fmt.Errorf("verify %s: finish: %w", name, classify(err))
	}
	sink.progress.end()
	return hex.EncodeToString(sink.h.Sum(nil)), nil
}

type hashSink struct {
	h        hash.Hash
	progress *progress
}

var zeros = make([]byte, 1<<20)

func (s *hashSink) hole(_ *libvirt.Stream, n int64) error {
	s.progress.add(n)
	for n > 0 {
		k := min(n, int64(len(zeros)))
		s.h.Write(zeros[:k])
		n -= k
	}
	return nil
}

// sparseSource feeds libvirt's sparse send from a local file: data where
// the file has data, holes where it has holes (SEEK_DATA/SEEK_HOLE).
type sparseSource struct {
	f        *os.File
	off      int64
	size     int64
	progress *progress
	err      error
}

func (s *sparseSource) data(ctx context.Context) libvirt.StreamSourceFunc {
	buf := make([]byte, 256<<10)
	return func(_ *libvirt.Stream, n int) ([]byte, error) {
		if err := ctx.Err(); err != nil {
			s.err = err
			return nil, err
		}
		k, err := s.f.ReadAt(buf[:min(n, len(buf))], s.off)
		if err != nil && !errors.Is(err, io.EOF) {
			s.err = err
			return nil, err
		}
		s.off += int64(k)
		s.progress.add(int64(k))
		return buf[:k], nil
	}
}

// hole says whether the file has data at the current offset and how long
// that data or hole goes on.
func (s *sparseSource) hole(_ *libvirt.Stream) (bool, int64, error) {
	if s.off >= s.size {
		return true, 0, nil
	}
	fd := int(s.f.Fd())
	data, err := unix.Seek(fd, s.off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return false, s.size - s.off, nil // a hole to the end
	}
	if err != nil {
		return true, s.size - s.off, nil // no SEEK_DATA here: all data
	}
	if data > s.off {
		return false, data - s.off, nil
	}
	end, err := unix.Seek(fd, s.off, unix.SEEK_HOLE)
	if err != nil {
		end = s.size
	}
	return true, min(end, s.size) - s.off, nil
}

func (s *sparseSource) skip(_ *libvirt.Stream, n int64) error {
	s.off += n
	s.progress.add(n)
	return nil
}

// progress logs a transfer's bytes done every progressEvery.
type progress struct {
	h          *Host
	op, name   string
	total      uint64
	done       int64
	start, log time.Time
}

func newProgress(h *Host, op, name string, total uint64) *progress {
	now := time.Now()
	return &progress{h: h, op: op, name: name, total: total, start: now, log: now}
}

func (p *progress) add(n int64) {
	p.done += n
	if time.Since(p.log) >= progressEvery {
		p.log = time.Now()
		p.h.log.Info("volume "+p.op, "volume", p.name, "done_bytes", p.done, "total_bytes", p.total)
	}
}

func (p *progress) end() {
	p.h.log.Info("volume "+p.op+" done", "volume", p.name, "bytes", p.total, "took", time.Since(p.start).Round(time.Millisecond))
}
