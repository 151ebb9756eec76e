// Package vmpool runs each tenant's VMs: it keeps the tenant's pool settings
// and VMs in the database, boots VMs on libvirt hosts in the background with
// visible progress, talks to the agent inside each one, keeps warm VMs ready,
// recycles old ones, notices VMs that die, and reconciles the database with
// libvirt at startup (adopting running VMs, destroying orphans of this
// installation, never touching anyone else's domains).
package vmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/tenants/clip"

	"github.com/jonboulle/clockwork"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor"
	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/sandbox/shutdown"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
)

// Hypervisor is what the pool needs of one libvirt host. *hypervisor.Host
// implements it.
type Hypervisor interface {
	URI() string
	DomainType(ctx context.Context) (string, error)
	Capacity(ctx context.Context) (hypervisor.Capacity, error)
	Create(ctx context.Context, spec hypervisor.DomainSpec) (*hypervisor.Domain, error)
	Lookup(ctx context.Context, id string) (hypervisor.DomainInfo, error)
	List(ctx context.Context) ([]hypervisor.DomainInfo, error)
	Destroy(ctx context.Context, id string) error
	OpenChannel(ctx context.Context, id, name string) (io.ReadWriteCloser, error)
	Events() <-chan hypervisor.Event
	Close() error
}

// Connector opens the Hypervisor at uri for one installation.
type Connector func(ctx context.Context, uri, installationID string, log *slog.Logger) (Hypervisor, error)

// ConnectLibvirt is the Connector for real libvirt hosts; the domain type
// (kvm or qemu) is detected by the host.
func ConnectLibvirt(ctx context.Context, uri, installationID string, log *slog.Logger) (Hypervisor, error) {
	return LibvirtConnector("", "")(ctx, uri, installationID, log)
}

// LibvirtConnector connects to real libvirt hosts. domainType forces "kvm"
// or "qemu" ("" detects); probeKernel is a guest kernel the host boots once
// to prove KVM really works before trusting it.
func LibvirtConnector(domainType, probeKernel string) Connector {
	return libvirtConnector(domainType, probeKernel, "", false, nil, nil)
}

// libvirtConnector also says where each host's storage pool goes (poolDir,
// "" for the default) and, for the probe, which hosts get their files
// through their pool (remote) and the probe kernel's checksum.
func libvirtConnector(domainType, probeKernel, poolDir string, channelStream bool, remote func(uri string) bool, sums map[string]string) Connector {
	return func(ctx context.Context, uri, installationID string, log *slog.Logger) (Hypervisor, error) {
		cfg := hypervisor.Config{URI: uri, InstallationID: installationID, Logger: log,
			DomainType: domainType, ProbeKernel: probeKernel, ProbeTimeout: 8 * time.Second, PoolDir: poolDir,
			ChannelStream: channelStream}
		if remote != nil && remote(uri) && probeKernel != "" {
			cfg.ProbeKernelSHA256 = sums[probeKernel]
			if cfg.ProbeKernelSHA256 == "" {
				cfg.ProbeKernel = "" // no checksum to upload it by: no probe, TCG
			}
		}
		h, err := hypervisor.Connect(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return h, nil
	}
}

// Config configures a Service. Zero durations take the defaults noted.
type Config struct {
	// URIs are the libvirt hosts (STOCKADE_LIBVIRT_URIS); default qemu:///system.
	URIs []string
	// ExecGrace is how long each agent keeps commands and terminals alive
	// after its session is lost, for the next session to re-attach them
	// (STOCKADE_EXEC_GRACE); 0 means the agent's default, 5 min.
	ExecGrace time.Duration
	// DataDir holds the guest image (image.Load) and the VMs' scratch
	// disks (DataDir/scratch).
	DataDir string
	// ScratchMiB is the size of each VM's scratch disk, which holds its
	// sandboxes' writable layers and workspaces (each bounded by its
	// sandbox's limits); default 65536 (32 sandboxes of 1 GiB + 1 GiB). The
	// file is sparse: it takes only what sandboxes write.
	ScratchMiB int
	Logger     *slog.Logger
	// Clock drives the pools' loops, backoffs and retries and stamps what
	// they record; default the real clock.
	Clock clockwork.Clock
	// DomainType forces "kvm" or "qemu" (STOCKADE_DOMAIN_TYPE); "" detects
	// it once per host with a real boot.
	DomainType string
	// Connect opens a host; default LibvirtConnector(DomainType, the guest kernel).
	Connect Connector
	// BootConcurrency bounds VMs booting at once; default 2 (TCG boot is
	// CPU-bound: more at once only makes each slower).
	BootConcurrency int
	// BootTimeout bounds define -> agent handshake; default 3 min.
	BootTimeout time.Duration
	// AdoptTimeout bounds the handshake with a VM found running; default 30 s.
	AdoptTimeout time.Duration
	// StopTimeout is how long a graceful stop may take before the VM is
	// destroyed; default 30 s.
	StopTimeout time.Duration
	// ConnectTimeout bounds one attempt to reach a host; default 15 s.
	ConnectTimeout time.Duration
	// ReconcileInterval is how often pools are topped up and old VMs
	// recycled (changes trigger it at once too); default 10 s.
	ReconcileInterval time.Duration
	// MonitorInterval is how often libvirt is polled for CPU use and for
	// domains that vanished without an event; default 2 s.
	MonitorInterval time.Duration
	// HostRefresh is how often host capacity and VM last-seen times are
	// written; default 15 s.
	HostRefresh time.Duration
	// Egress serves the connections sandboxes make through their agent's
	// proxy listener; nil refuses them (sandboxes then have no way out).
	Egress EgressGateway
	// Freezes refuses VM starts for a frozen tenant (incident response);
	// *tenants.Store implements it. Nil: no tenant is ever frozen.
	Freezes Freezes
	// Leases are the per-VM channel leases of several replicas
	// (sandbox/replicas); nil: this process owns every VM.
	Leases Leases
	// HostFiles says per host URI where its VMs find the guest's files
	// (STOCKADE_HOST_FILES, hostfiles.go): FilesLocal, the data dir's own
	// paths, or FilesRemote, the host's storage pool filled through
	// libvirt. A host not named gets DefaultFilesMode(uri).
	HostFiles map[string]FilesMode
	// PoolDir is the folder of the installation's storage pool on each
	// remote host (STOCKADE_HOST_POOL_DIR); default
	// /var/lib/libvirt/stockade/<installation id>.
	PoolDir string
	// ChannelStream reaches agent channels through libvirt's stream API
	// even on local hosts (hypervisor.Config.ChannelStream;
	// STOCKADE_CHANNEL_DIRECT=false).
	ChannelStream bool
	// HostFilesInterval is how often the leader visits each remote host's
	// files (uploads, scratch sweep, GC); default HostFilesInterval.
	HostFilesInterval time.Duration
	// Leader says whether this replica holds the leader lease, which runs
	// warm-pool filling and recycling; nil: always.
	Leader func() bool
	// Snapshots restores VMs from a memory snapshot of a booted guest
	// instead of cold booting them (STOCKADE_VM_SNAPSHOTS; snapshot.go).
	Snapshots bool
	// SnapshotsShared makes one snapshot per host and VM shape serve
	// every tenant (STOCKADE_VM_SNAPSHOTS_SHARED). Off (the default), each
	// tenant's VMs restore from a snapshot of their own: VMs restored from
	// one snapshot share what the guest kernel drew at boot and cannot
	// redraw (its KASLR offset, stack canary, pointer and hash keys), so a
	// kernel infoleak in one tenant's VM would tell another tenant's
	// layout; per tenant, only that tenant's own VMs share them.
	SnapshotsShared bool
	// AgentReady runs in the background after the handshake of every VM
	// this service boots (ready.go): sandbox.PrestartHook configures the
	// guest's pre-started sandboxes there. Nil: nothing.
	AgentReady func(ctx context.Context, vm VM, c *agentproto.Client)
}

// Freezes tells whether a tenant is frozen: CheckNotFrozen's error (it
// wraps errdefs.ErrConflict) names the freeze.
type Freezes interface {
	CheckNotFrozen(ctx context.Context, tenantID string) error
}

// EgressGateway gives the handler for the egress streams of one VM's agent
// session (sandbox/egress.Gateway). The tenant and VM come from which
// channel the host opened, never from the guest.
type EgressGateway interface {
	Handler(tenantID, vmID string) agentproto.EgressHandler
}

func (c *Config) checkAndSetDefaults() error {
	if len(c.URIs) == 0 {
		c.URIs = []string{hypervisor.DefaultURI}
	}
	seen := map[string]bool{}
	for _, u := range c.URIs {
		if u == "" || seen[u] {
			return fmt.Errorf("vm pool: libvirt URI %q is empty or repeated", u)
		}
		seen[u] = true
	}
	if c.DataDir == "" {
		return errors.New("vm pool: DataDir is required (the guest image lives there)")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Connect == nil {
		// The guest kernel doubles as the KVM probe; a stock kernel panics
		// at once without a root file system, under KVM in well under 8 s.
		kernel := ""
		var sums map[string]string
		if m, err := image.Load(c.DataDir); err == nil {
			kernel, sums = m.Guest.Kernel, m.Checksums
		}
		modes := c.HostFiles
		c.Connect = libvirtConnector(c.DomainType, kernel, c.PoolDir, c.ChannelStream,
			func(uri string) bool { return filesMode(modes, uri) == FilesRemote }, sums)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.BootConcurrency <= 0 {
		c.BootConcurrency = 2
	}
	if c.ScratchMiB <= 0 {
		c.ScratchMiB = 64 << 10
	}
	def(&c.BootTimeout, 3*time.Minute)
	def(&c.AdoptTimeout, 30*time.Second)
	def(&c.StopTimeout, 30*time.Second)
	def(&c.ConnectTimeout, 15*time.Second)
	def(&c.ReconcileInterval, 10*time.Second)
	def(&c.MonitorInterval, 2*time.Second)
	def(&c.HostRefresh, 15*time.Second)
	def(&c.HostFilesInterval, HostFilesInterval)
	return nil
}

// Service runs the VM pools of every tenant on a set of libvirt hosts.
type Service struct {
	cfg       Config
	store     *Store
	tenants   *tenants.Store // quotas
	audit     *audit.Log
	log       *slog.Logger
	installID string

	// stop is closed by Close; it bounds background work only.
	stop *shutdown.Signal
	wg   sync.WaitGroup

	hostsMu   sync.Mutex
	hosts     []*hostConn // read through hostList; AddHost appends
	bootSlots chan struct{}
	kickc     chan string // tenants to reconcile now

	files filesState // remote hosts' files (hostfiles_sync.go)

	mu        sync.Mutex
	vms       map[string]*runtime
	backoff   map[string]backoff // per tenant, after failed warm boots
	snaps     *snapshots
	started   bool
	closeOnce sync.Once
}

type backoff struct {
	until    time.Time
	failures int
}

// NewService returns a Service keeping its VMs in store, reading quotas
// from ts and recording to auditLog, for the installation installID
// (ts.InstallationID): the composition root builds each store once and
// passes it in. Start it to connect to the hosts.
func NewService(store *Store, ts *tenants.Store, auditLog *audit.Log, installID string, cfg Config) (*Service, error) {
	if store == nil || ts == nil || auditLog == nil || installID == "" {
		return nil, errors.New("vm pool: a store, the tenants store, an audit log and the installation id are required")
	}
	if err := cfg.checkAndSetDefaults(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, store: store, tenants: ts, audit: auditLog, log: cfg.Logger.With("component", "vmpool"),
		installID: installID,
		bootSlots: make(chan struct{}, cfg.BootConcurrency),
		kickc:     make(chan string, 64),
		vms:       map[string]*runtime{},
		backoff:   map[string]backoff{},
		snaps:     newSnapshots(),
	}
	for _, u := range cfg.URIs {
		s.hosts = append(s.hosts, &hostConn{uri: u, reason: "not connected yet", cpu: map[string]cpuSample{}})
	}
	s.stop = shutdown.New()
	if cfg.Leases != nil {
		store.leases = cfg.Leases
		cfg.Leases.OnLost(s.leaseLost)
	}
	return s, nil
}

// New returns a Service on db (opened and migrated), building its own
// stores.
//
// Deprecated: kept for callers that hold only a *gorm.DB (tests); the
// composition root builds the stores once and calls NewService.
func New(ctx context.Context, db *gorm.DB, cfg Config) (*Service, error) {
	var now func() time.Time
	if cfg.Clock != nil {
		now = cfg.Clock.Now
	}
	store := NewStore(db, now)
	id, err := store.InstallationID(ctx)
	if err != nil {
		return nil, fmt.Errorf("vm pool: %w", err)
	}
	return NewService(store, tenants.NewStore(db, now), audit.NewLog(db, now), id, cfg)
}

// Store is the service's store.
func (s *Service) Store() *Store { return s.store }

// InstallationID is the installation whose domains this service manages.
func (s *Service) InstallationID() string { return s.installID }

// Start connects to every host (each first attempt bounded by
// ConnectTimeout), reconciles each reachable one with the database, then
// runs the pool in the background. Unreachable hosts are retried in the
// background: Start succeeds with libvirtd down, and VM operations answer
// ErrUnavailable until a host is reached.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("vm pool: already started")
	}
	s.started = true
	s.mu.Unlock()

	if err := s.loadHosts(ctx); err != nil {
		return fmt.Errorf("start vm pool: %w", err)
	}
	hosts := s.hostList()
	firsts := make([]chan struct{}, len(hosts))
	for i, h := range hosts {
		firsts[i] = make(chan struct{})
		s.runHost(h, firsts[i])
	}
	for _, f := range firsts {
		select {
		case <-f:
		case <-ctx.Done():
			return fmt.Errorf("start vm pool: %w", ctx.Err())
		}
	}
	if err := s.Available(); err != nil {
		s.log.Warn("no libvirt host reachable: VMs cannot start until one is; retrying in the background", "err", err)
	}
	s.wg.Add(3)
	go s.reconcileLoop()
	go s.monitorLoop()
	go s.hostsLoop()
	return nil
}

// Close stops the background work and closes the agent sessions and host
// connections. Running VMs are left running: the next Start adopts them.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.stop.Close()
		s.wg.Wait()
		s.dropSpares() // spare.go
		s.mu.Lock()
		rts := make([]*runtime, 0, len(s.vms))
		for _, rt := range s.vms {
			rts = append(rts, rt)
		}
		s.vms = map[string]*runtime{}
		s.mu.Unlock()
		for _, rt := range rts {
			rt.closeClient()
		}
		for _, h := range s.hostList() {
			if hv := h.take(); hv != nil {
				if err := hv.Close(); err != nil {
					s.log.Warn("close libvirt host", "uri", h.uri, "err", err)
				}
			}
		}
	})
	return nil
}

// Available is nil when at least one host is reachable, else an error
// wrapping ErrUnavailable that says why for each host.
func (s *Service) Available() error {
	var why []string
	for _, h := range s.hostList() {
		if _, err := h.live(); err == nil {
			return nil
		}
		h.mu.Lock()
		why = append(why, fmt.Sprintf("libvirt at %s: %s", h.uri, h.reason))
		h.mu.Unlock()
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(why, "; "))
}

// Started is nil once Start has run, else an error wrapping ErrUnavailable:
// a service that was built but never started (a server without libvirt)
// serves its records and refuses everything that needs a VM.
func (s *Service) Started() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return fmt.Errorf("%w: the VM pools are not running on this server", ErrUnavailable)
	}
	return nil
}

// hostConn is one configured libvirt host and what we know of it.
type hostConn struct {
	uri string

	mu        sync.Mutex
	hv        Hypervisor // nil until the first successful connect
	connected bool       // false while libvirt is unreachable
	reason    string     // why not connected
	capacity  hypervisor.Capacity
	domType   string
	reserved  int // MiB of boots in flight, not yet in capacity
	cpu       map[string]cpuSample
	lastSeen  time.Time
	answered  time.Time // last call libvirt answered (hosts_service.go)
	connOK    time.Time // last time its connection was live (hosts_service.go)
	slow      string    // why it is slow: calls time out on a live connection
	down      bool      // recorded down: its VMs were lost
	removed   bool      // RemoveHost: supervision ends
}

type cpuSample struct {
	cpu     time.Duration
	at      time.Time
	percent float64 // of the VM's vCPUs over the last interval; -1 unknown
}

// live returns the host's Hypervisor when it is connected.
func (h *hostConn) live() (Hypervisor, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hv == nil || !h.connected {
		return nil, fmt.Errorf("%w: libvirt at %s: %s", ErrUnavailable, h.uri, h.reason)
	}
	return h.hv, nil
}

func (h *hostConn) take() Hypervisor {
	h.mu.Lock()
	defer h.mu.Unlock()
	hv := h.hv
	h.hv, h.connected, h.reason = nil, false, "closed"
	return hv
}

func (h *hostConn) setDown(reason string) {
	h.mu.Lock()
	h.connected, h.reason = false, reason
	h.mu.Unlock()
}

func (h *hostConn) setUp(hv Hypervisor) {
	h.mu.Lock()
	h.hv, h.connected, h.reason = hv, true, ""
	h.mu.Unlock()
}

func (s *Service) hostByURI(uri string) *hostConn {
	for _, h := range s.hostList() {
		if h.uri == uri {
			return h
		}
	}
	return nil
}

// liveHost returns the Hypervisor of a VM's host, or ErrUnavailable.
func (s *Service) liveHost(uri string) (*hostConn, Hypervisor, error) {
	h := s.hostByURI(uri)
	if h == nil {
		return nil, nil, fmt.Errorf("%w: libvirt host %s is not configured (STOCKADE_LIBVIRT_URIS)", ErrUnavailable, uri)
	}
	hv, err := h.live()
	return h, hv, err
}

func (h *hostConn) reserve(mib int) {
	h.mu.Lock()
	h.reserved += mib
	h.mu.Unlock()
}

// superviseHost connects to a host, retrying with backoff until it works,
// then reconciles it and follows its events until Close.
func (s *Service) superviseHost(h *hostConn, first chan struct{}) {
	defer s.wg.Done()
	signalled := false
	signal := func() {
		if !signalled {
			close(first)
			signalled = true
		}
	}
	defer signal()
	delay := time.Second
	for {
		ctx, cancel := s.stop.WithTimeout(context.Background(), s.cfg.ConnectTimeout)
		hv, err := s.cfg.Connect(ctx, h.uri, s.installID, s.log)
		cancel()
		if s.stop.Err() != nil {
			if hv != nil {
				hv.Close()
			}
			return
		}
		if h.isRemoved() {
			if hv != nil {
				hv.Close()
			}
			return
		}
		if err != nil {
			h.setDown(err.Error())
			s.recordHost(h)
			if !signalled {
				s.log.Warn("libvirt host unreachable", "uri", h.uri, "err", err)
			}
			signal()
			select {
			case <-s.stop.Done():
				return
			case <-s.cfg.Clock.After(delay):
			}
			delay = min(delay*2, 30*time.Second)
			continue
		}
		h.setUp(hv)
		s.refreshHost(h)
		s.log.Info("libvirt host connected", "uri", h.uri)
		s.reconcileHost(h, hv)
		signal()
		s.watchEvents(h, hv)
		return
	}
}

// refreshHost reads the host's capacity and domain type and records them.
func (s *Service) refreshHost(h *hostConn) {
	hv, err := h.live()
	if err != nil {
		s.recordHost(h)
		return
	}
	ctx, cancel := s.stop.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	capacity, err := hv.Capacity(ctx)
	if err != nil {
		// One call's error is not the host's: the host stays up (its VMs'
		// sessions and execs with it) unless the connection's own liveness
		// probe fails, which the hypervisor reports as KindDisconnected.
		// Marking it down here would also keep it down, as only
		// KindReconnected brings it back.
		s.log.Warn("read host capacity", "uri", h.uri, "err", err)
		s.recordHost(h)
		return
	}
	dt, err := hv.DomainType(ctx)
	if err != nil {
		s.log.Warn("detect domain type", "uri", h.uri, "err", err)
	}
	h.mu.Lock()
	h.capacity, h.lastSeen = capacity, s.cfg.Clock.Now()
	if dt != "" {
		h.domType = dt
	}
	h.mu.Unlock()
	s.recordHost(h)
}

func (s *Service) recordHost(h *hostConn) {
	h.mu.Lock()
	rec := Host{URI: h.uri, CPUs: h.capacity.CPUs, MemoryKiB: h.capacity.MemoryTotalKiB,
		FreeMemoryKiB: h.capacity.MemoryFreeKiB, DomainType: h.domType, Health: HealthOK}
	if h.hv == nil || !h.connected {
		rec.Health, rec.HealthReason = HealthUnavailable, truncate(h.reason, 500)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.upsertHost(ctx, rec); err != nil {
		s.log.Warn("record host", "uri", h.uri, "err", err)
	}
}

// HostStatus is a configured host as operators see it.
type HostStatus struct {
	Host
	Configured bool // in STOCKADE_LIBVIRT_URIS now
	Connected  bool
	Reason     string // why not connected
	Slow       string // why it is slow (connected, its calls time out)
	Capacity   hypervisor.Capacity
	ActiveVMs  int
	VCPUs      int // of the active VMs, as allocated
	MemoryMiB  int
}

// Hosts returns every known host: the configured ones first, live status
// where the service has it.
func (s *Service) Hosts(ctx context.Context) ([]HostStatus, error) {
	recs, err := s.store.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	byURI := map[string]Host{}
	for _, r := range recs {
		byURI[r.URI] = r
	}
	all, err := s.store.AllVMs(ctx)
	if err != nil {
		return nil, err
	}
	var out []HostStatus
	add := func(st HostStatus) {
		for _, vm := range all {
			if vm.HostURI == st.URI && vm.State.Active() {
				st.ActiveVMs++
				st.VCPUs += vm.VCPUs
				st.MemoryMiB += vm.MemoryMiB
			}
		}
		out = append(out, st)
	}
	for _, h := range s.hostList() {
		st := HostStatus{Host: byURI[h.uri], Configured: true}
		st.URI = h.uri
		h.mu.Lock()
		st.Connected, st.Reason, st.Capacity, st.Slow = h.hv != nil && h.connected, h.reason, h.capacity, h.slow
		h.mu.Unlock()
		delete(byURI, h.uri)
		add(st)
	}
	rest := make([]string, 0, len(byURI))
	for u := range byURI {
		rest = append(rest, u)
	}
	slices.Sort(rest)
	for _, u := range rest {
		if byURI[u].State != HostRemoved {
			add(HostStatus{Host: byURI[u], Reason: "no longer configured"})
		}
	}
	return out, nil
}

// truncate bounds s for a column or a message (clip.String).
func truncate(s string, n int) string { return clip.String(s, n) }

// agentOptions are the client options of every agent session.
func (s *Service) agentOptions(vm VM) agentproto.ClientOptions {
	opts := agentproto.ClientOptions{Name: "stockade-vmpool", Logger: s.log, ExecGrace: s.cfg.ExecGrace}
	if s.cfg.Egress != nil {
		opts.Egress = s.cfg.Egress.Handler(vm.TenantID, vm.ID)
	}
	return opts
}
