package vmpool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Restores off the critical path (spare.go). A restore needs its own copy
// of the snapshot file (libvirt restores a clone whose header names the new
// domain: hypervisor.Restore) and of the snapshot's scratch disk (the guest
// resumes with that disk's filesystem mounted). Copying them on demand
// costs a restore the copy (the snapshot is ~100 MiB), so each slot keeps
// one spare: both copies made and checked in the background after a build
// and after every restore, taken (renamed) by the next restore. Spares
// live next to the snapshot as slot.spare-<uuid>.{snap,scratch}, are
// counted in snapshotFiles and go with the snapshot; one from an earlier
// process (not in snaps.spares) is an orphan and is removed before the
// next one is made; Close removes this process's.

// prestartWait bounds how long a snapshot build waits for its pre-started
// sandboxes.
const prestartWait = 2 * time.Minute

// scratchTarget is the scratch disk's target after n template disks (the
// same as createScratch's).
func scratchTarget(n int) string { return "vd" + string(rune('b'+n)) }

// snapshotFiles are every file of a snapshot slot in dir: the sidecar, the
// snapshot and its scratch disk, spares, and any half-made one.
func snapshotFiles(dir, slot string) []string {
	out := []string{filepath.Join(dir, slot+".json"), filepath.Join(dir, slot+".snap"), filepath.Join(dir, slot+".scratch")}
	for _, pat := range []string{".spare-*", ".snap.*", ".scratch.*", ".json.*"} {
		m, _ := filepath.Glob(filepath.Join(dir, slot+pat))
		out = append(out, m...)
	}
	return out
}

// warmSnapshotVM makes the snapshot VM what a warm VM is before it is
// saved: the AgentReady hook configures its pre-started sandboxes (as it
// does on every VM), and the build waits until they run. Best effort: a
// pool that does not fill in time is logged and the VM is saved as it is.
func (s *Service) warmSnapshotVM(ctx context.Context, vm VM, c *agentproto.Client) {
	if s.cfg.AgentReady == nil {
		return
	}
	s.cfg.AgentReady(ctx, vm, c)
	wctx, cancel := context.WithTimeout(ctx, prestartWait)
	defer cancel()
	for {
		st, err := c.ConfigurePrestart(wctx, agentproto.PrestartConfig{Query: true})
		if err != nil {
			s.log.Warn("snapshot vm: pre-started sandboxes", "vm", vm.ID, "err", err)
			return
		}
		full := true
		for _, p := range st.Pools {
			full = full && p.Starting == 0 && p.Ready >= st.PerTemplate
		}
		if full {
			s.log.Debug("snapshot vm warm", "vm", vm.ID, "pools", st.Pools)
			return
		}
		select {
		case <-wctx.Done():
			s.log.Warn("snapshot vm: pre-started sandboxes not ready: saved without them", "vm", vm.ID, "pools", st.Pools)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// takeSpare hands out key's spare if it was made from rs's files as they
// are now; a spare of another snapshot or of a changed file is removed.
func (s *Service) takeSpare(key string, rs *restorable) *spare {
	sum := rs.snap.SHA256
	s.snaps.mu.Lock()
	sp, ok := s.snaps.spares[key]
	delete(s.snaps.spares, key)
	s.snaps.mu.Unlock()
	if !ok {
		return nil
	}
	if sp.sum != sum || sp.from != filesStamp(rs) {
		os.Remove(sp.snap)
		os.Remove(sp.scratch)
		return nil
	}
	return &sp
}

// prepareSpare makes dir/slot's next spare in the background, unless one
// is there or on its way.
func (s *Service) prepareSpare(shv snapshotHV, dir, slot string, rs *restorable) {
	key := dir + slot
	s.snaps.mu.Lock()
	_, have := s.snaps.spares[key]
	if have || s.snaps.preparing[key] || s.stop.Err() != nil {
		s.snaps.mu.Unlock()
		return
	}
	s.snaps.preparing[key] = true
	// Spares on disk before this process made one are orphans (of an
	// earlier process): no restore holds one. Later ones are never left
	// (a failed prepare removes its files), and one a restore took may
	// not be renamed yet.
	sweep := !s.snaps.swept[key]
	s.snaps.swept[key] = true
	s.snaps.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.snaps.mu.Lock()
			delete(s.snaps.preparing, key)
			s.snaps.mu.Unlock()
		}()
		if sweep {
			old, _ := filepath.Glob(filepath.Join(dir, slot+".spare-*"))
			for _, p := range old {
				os.Remove(p)
			}
		}
		ctx, cancel := s.stop.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		base := filepath.Join(dir, slot+".spare-"+uuid.NewString())
		sp := spare{snap: base + ".snap", scratch: base + ".scratch", sum: rs.snap.SHA256, from: filesStamp(rs)}
		err := shv.PrepareSnapshot(ctx, rs.snap, sp.snap)
		if err == nil {
			err = copyScratch(rs, sp.scratch)
		}
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err == nil && filesStamp(rs) != sp.from {
			err = errors.New("the snapshot changed while it was copied")
		}
		if err != nil {
			os.Remove(sp.snap)
			os.Remove(sp.scratch)
			if s.stop.Err() == nil {
				s.log.Warn("prepare vm snapshot spare", "slot", slot, "err", err)
			}
			return
		}
		s.snaps.mu.Lock()
		s.snaps.spares[key] = sp
		s.snaps.mu.Unlock()
		s.log.Debug("vm snapshot spare ready", "slot", slot, "took", time.Since(start).Round(time.Millisecond))
	}()
}

// filesStamp is what changes when rs's files are written or replaced.
func filesStamp(rs *restorable) string {
	var b strings.Builder
	for _, p := range []string{rs.snap.Path, rs.scratch} {
		st, err := os.Stat(p)
		if err != nil {
			return "missing " + p
		}
		fmt.Fprintf(&b, "%d %d;", st.Size(), st.ModTime().UnixNano())
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(&b, "%d %d;", sys.Ino, sys.Ctim.Nano())
		}
	}
	return b.String()
}

// dropSpares removes the spares on Close: only this process would take
// them (the next one sweeps what it did not make).
func (s *Service) dropSpares() {
	s.snaps.mu.Lock()
	spares := s.snaps.spares
	s.snaps.spares = map[string]spare{}
	s.snaps.mu.Unlock()
	for _, sp := range spares {
		os.Remove(sp.snap)
		os.Remove(sp.scratch)
	}
}

// placeScratch puts the snapshot's scratch disk at dst: the spare's copy,
// else a checked copy made now.
func placeScratch(sp *spare, rs *restorable, dst string) error {
	if sp != nil {
		if err := os.Rename(sp.scratch, dst); err == nil {
			return nil
		}
		os.Remove(sp.scratch)
	}
	tmp := dst + ".tmp"
	if err := copyScratch(rs, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("place scratch disk: %w", err)
	}
	return nil
}

// copyScratch copies rs's scratch disk to dst, checking it against the
// sum recorded at build.
func copyScratch(rs *restorable, dst string) error {
	sum, _, err := sparseCopy(rs.scratch, dst)
	if err != nil {
		return fmt.Errorf("%w: scratch disk: %w", hypervisor.ErrSnapshotCorrupt, err)
	}
	if sum != rs.scratchSum {
		os.Remove(dst)
		return fmt.Errorf("%w: scratch disk %s hashes to %s; want %s", hypervisor.ErrSnapshotCorrupt, rs.scratch, sum, rs.scratchSum)
	}
	return nil
}

// sparseChunk is the unit sparseCopy reads, skips when zero and hashes.
const sparseChunk = 64 << 10

// sparseCopy copies the sparse file src to dst ("": only hash) keeping
// holes, and returns the SHA-256 of its content as (offset, chunk) pairs
// of its non-zero chunks and its size: equal for files of equal bytes
// whatever their holes. Only the data extents are read (SEEK_DATA). A
// failed copy leaves no dst.
func sparseCopy(src, dst string) (sum string, size int64, err error) {
	in, err := os.Open(src)
	if err != nil {
		return "", 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return "", 0, err
	}
	size = st.Size()
	var out *os.File
	if dst != "" {
		if out, err = os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			return "", 0, err
		}
		defer func() {
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(dst)
			}
		}()
		if err := out.Truncate(size); err != nil {
			return "", 0, err
		}
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	zero := make([]byte, sparseChunk)
	var off [8]byte
	// Whole chunks, each once, in order: the sum does not depend on
	// where the extents start and end (a chunk outside them is zero).
	next := int64(0) // the first chunk not yet read
	for pos := int64(0); pos < size; {
		data, err := unix.Seek(int(in.Fd()), pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // holes to the end
		}
		if err != nil {
			return "", 0, fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return "", 0, fmt.Errorf("seek hole: %w", err)
		}
		end := min(size, (hole+sparseChunk-1)/sparseChunk*sparseChunk)
		for p := max(next, data-data%sparseChunk); p < end; {
			b := buf[:min(int64(len(buf)), end-p)]
			if _, err := in.ReadAt(b, p); err != nil && !errors.Is(err, io.EOF) {
				return "", 0, err
			}
			for c := 0; c < len(b); c += sparseChunk {
				chunk := b[c:min(c+sparseChunk, len(b))]
				if bytes.Equal(chunk, zero[:len(chunk)]) {
					continue
				}
				binary.LittleEndian.PutUint64(off[:], uint64(p+int64(c)))
				h.Write(off[:])
				h.Write(chunk)
				if out != nil {
					if _, err := out.WriteAt(chunk, p+int64(c)); err != nil {
						return "", 0, err
					}
				}
			}
			p += int64(len(b))
		}
		next = max(next, end)
		pos = max(hole, end)
	}
	binary.LittleEndian.PutUint64(off[:], uint64(size))
	h.Write(off[:])
	return hex.EncodeToString(h.Sum(nil)), size, nil
}
