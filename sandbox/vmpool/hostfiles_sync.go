package vmpool

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image"
)

// Remote hosts' files, kept (hostfiles_sync.go). The leader visits each
// connected remote host every HostFilesInterval (the first visit within a
// reconcile of its connecting; Config.HostFilesInterval): it uploads the current guest image's files
// that are missing, so the first boot there rarely waits for them, removes
// the scratch volumes of ended VMs, and deletes (GC) the shared volumes no
// domain uses that are neither the current image's nor ensured lately by
// this process (KeepRecent: a boot of the image before a rebuild, a tenant
// template that is plugged in and out).

// HostFilesInterval is how often the leader visits each remote host's
// files unless Config.HostFilesInterval says otherwise.
const HostFilesInterval = 5 * time.Minute

// KeepRecent is how long a volume ensured by this process stays safe from GC.
const KeepRecent = 24 * time.Hour

// filesState is the Service's record of remote hosts' files.
type filesState struct {
	sums fileSums // of tenant template files sent to remote hosts

	mu       sync.Mutex
	busy     map[string]bool                 // host uri: a visit under way
	next     map[string]time.Time            // host uri: when the next visit is due
	lastUsed map[string]map[string]time.Time // host uri -> volume name -> last ensured
}

func (f *filesState) used(now time.Time, uri, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastUsed == nil {
		f.lastUsed = map[string]map[string]time.Time{}
	}
	if f.lastUsed[uri] == nil {
		f.lastUsed[uri] = map[string]time.Time{}
	}
	f.lastUsed[uri][name] = now
}

func (f *filesState) recent(now time.Time, uri, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.lastUsed[uri][name]
	return ok && now.Sub(at) < KeepRecent
}

// begin marks a visit of uri under way when one is due.
func (f *filesState) begin(now time.Time, uri string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy == nil {
		f.busy, f.next = map[string]bool{}, map[string]time.Time{}
	}
	if f.busy[uri] || now.Before(f.next[uri]) {
		return false
	}
	f.busy[uri] = true
	return true
}

func (f *filesState) end(next time.Time, uri string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy[uri] = false
	f.next[uri] = next
}

// syncHostFiles starts a visit of each connected remote host that is due,
// in the background (an upload takes minutes). The leader's.
func (s *Service) syncHostFiles() {
	for _, h := range s.hostList() {
		if s.FilesModeOf(h.uri) != FilesRemote {
			continue
		}
		if _, err := h.live(); err != nil || !s.files.begin(s.cfg.Clock.Now(), h.uri) {
			continue
		}
		s.wg.Add(1)
		go func(uri string) {
			defer s.wg.Done()
			s.visitHostFiles(uri)
			s.files.end(s.cfg.Clock.Now().Add(s.cfg.HostFilesInterval), uri)
		}(h.uri)
	}
}

// visitHostFiles ensures the current image's files on the remote host,
// sweeps its scratch volumes and collects its unused volumes.
func (s *Service) visitHostFiles(uri string) {
	ctx, cancel := s.stop.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	st, err := s.storageOf(uri)
	if err != nil {
		return
	}
	m, err := image.Load(s.cfg.DataDir)
	if err != nil {
		s.log.Warn("host files: no guest image", "host", uri, "err", err)
		return
	}
	files, err := s.HostFiles(ctx, uri, m.Guest)
	if err != nil {
		s.log.Warn("host files: upload the guest image", "host", uri, "err", err)
		return // no GC either: what is there may be all it has
	}
	s.sweepScratchVolumes(ctx, uri, st)
	s.sweepRemoteSnapshots(ctx, uri, files) // snapshot_remote.go
	current := map[string]bool{}
	if vols, err := guestVolumes(m, m.Guest, m.Templates); err == nil {
		for _, v := range vols {
			current[v.name] = true
		}
	}
	now := s.cfg.Clock.Now()
	deleted, err := st.GC(ctx, func(name string) bool {
		base, _, _ := strings.Cut(name, ".part-")
		return current[name] || s.files.recent(now, uri, base)
	})
	if err != nil {
		s.log.Warn("host files: gc", "host", uri, "err", err)
	}
	if len(deleted) > 0 {
		s.log.Info("host files: unused volumes deleted", "host", uri, "volumes", deleted)
	}
}
