package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Pre-started sandboxes (prestart.go)
//
// The agent keeps a few sandboxes of each pooled template started but given
// to no one: the template's root with an empty writable layer and an empty
// /workspace, the default limits, hostname "sandbox", no env of the host's,
// no CA, no volume, and nothing but their init running. A sandbox.create
// whose spec the pool can take (no volumes; see claimable) claims one: the
// host's id, limits (cgroup files, disk and workspace quotas or tmpfs
// sizes), CA files, hostname, env (added to every command's environment)
// and timers are applied to it, then it runs like a fresh one. A failed
// claim destroys the member and the create starts a fresh sandbox. The pool
// refills in the background, one sandbox at a time, only while the guest
// has room (the sandbox cap, MemAvailable); a create that needs the room
// evicts a member first. Members live under their own ids (prestartPrefix,
// which no host id can take), so paths, cgroups and crun's container id
// never name the host's sandbox: only its record does.

// prestartPrefix starts every pool member's guest-internal id: a host's
// sandbox id starts with a letter or digit (agentproto.ValidSandboxID).
const prestartPrefix = "_prestart-"

// prestartMinAvailable is the MemAvailable below which no member is started.
const prestartMinAvailable = 128 << 20

// prestartStartTimeout bounds one member's start.
const prestartStartTimeout = 2 * time.Minute

// prestartPool is the pool's state; Manager.pool.
type prestartPool struct {
	mu        sync.Mutex
	per       int
	templates []string // pooled, in the order they joined
	ready     map[string][]*sandbox
	starting  map[string]int
	seq       uint64
	claimed   int
	running   bool          // the filler goroutine runs
	wake      chan struct{} // wakes the filler (capacity 1)
}

// pool returns the Manager's pool, made on first use.
func (m *Manager) prestart() *prestartPool {
	m.poolOnce.Do(func() {
		m.pool = &prestartPool{ready: map[string][]*sandbox{}, starting: map[string]int{}, wake: make(chan struct{}, 1)}
	})
	return m.pool
}

// members counts the pool's sandboxes, started and starting. Callers hold p.mu.
func (p *prestartPool) membersLocked() int {
	n := 0
	for _, l := range p.ready {
		n += len(l)
	}
	for _, c := range p.starting {
		n += c
	}
	return n
}

func (p *prestartPool) statusLocked() agentproto.PrestartStatus {
	st := agentproto.PrestartStatus{PerTemplate: p.per, Claimed: p.claimed, Pools: []agentproto.PrestartPool{}}
	for _, t := range p.templates {
		st.Pools = append(st.Pools, agentproto.PrestartPool{Template: t, Ready: len(p.ready[t]), Starting: p.starting[t]})
	}
	return st
}

func (p *prestartPool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// ConfigurePrestart sets the pool (agentproto.OpSandboxPrestart).
func (m *Manager) ConfigurePrestart(cfg agentproto.PrestartConfig) (agentproto.PrestartStatus, error) {
	p := m.prestart()
	if cfg.Query {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.statusLocked(), nil
	}
	if cfg.PerTemplate < 0 || cfg.PerTemplate > agentproto.MaxPrestartPerTemplate {
		return agentproto.PrestartStatus{}, fmt.Errorf("prestart: per_template %d: want 0 to %d: %w",
			cfg.PerTemplate, agentproto.MaxPrestartPerTemplate, agentproto.ErrBadRequest)
	}
	if len(cfg.Templates) > agentproto.MaxPrestartTemplates {
		return agentproto.PrestartStatus{}, fmt.Errorf("prestart: %d templates: want at most %d: %w",
			len(cfg.Templates), agentproto.MaxPrestartTemplates, agentproto.ErrBadRequest)
	}
	for _, t := range cfg.Templates {
		if !validTemplateName.MatchString(t) {
			return agentproto.PrestartStatus{}, fmt.Errorf("prestart: template name %q: %w", t, agentproto.ErrBadRequest)
		}
	}
	p.mu.Lock()
	p.per = cfg.PerTemplate
	var evict []*sandbox
	if p.per == 0 {
		p.templates = nil
	}
	for _, t := range cfg.Templates {
		if p.per > 0 && !slices.Contains(p.templates, t) && len(p.templates) < agentproto.MaxPrestartTemplates {
			p.templates = append(p.templates, t)
		}
	}
	// Members beyond the new size (all of them when disabled) go.
	for t, l := range p.ready {
		keep := p.per
		if !slices.Contains(p.templates, t) {
			keep = 0
		}
		if len(l) > keep {
			evict = append(evict, l[keep:]...)
			p.ready[t] = l[:keep]
		}
	}
	st := p.statusLocked()
	p.ensureFillerLocked(m)
	p.mu.Unlock()
	m.evictMembers(evict)
	p.kick()
	m.log.Info("pre-started sandboxes", "per_template", st.PerTemplate, "templates", len(st.Pools))
	return st, nil
}

func (p *prestartPool) ensureFillerLocked(m *Manager) {
	if !p.running && p.per > 0 {
		p.running = true
		go m.fillPool()
	}
}

// evictMembers stops pool members that were taken out of the pool.
func (m *Manager) evictMembers(sbs []*sandbox) {
	for _, sb := range sbs {
		m.stop(sb, agentproto.ReasonDestroyed)
	}
}

// fillPool starts missing members, one at a time, whenever woken. A start
// that fails waits for the next wake (a claim, a create, a configure).
func (m *Manager) fillPool() {
	p := m.prestart()
	for range p.wake {
		for {
			tpl, ok := m.nextToFill()
			if !ok {
				break
			}
			sb, err := m.startMember(tpl)
			if err != nil {
				m.log.Warn("pre-start sandbox", "template", tpl, "err", err)
				if errors.Is(err, agentproto.ErrNotFound) {
					// No such template in this VM: a create that uses
					// one by that name later pools it again.
					p.mu.Lock()
					p.templates = slices.DeleteFunc(p.templates, func(t string) bool { return t == tpl })
					p.mu.Unlock()
				}
			}
			if !m.addMember(tpl, sb) || err != nil {
				break
			}
		}
	}
}

// nextToFill reserves a start for the first template short of members, if
// the guest has room for one more sandbox.
func (m *Manager) nextToFill() (string, bool) {
	p := m.prestart()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.per == 0 || !m.poolRoomLocked(p) {
		return "", false
	}
	for _, t := range p.templates {
		if len(p.ready[t])+p.starting[t] < p.per {
			p.starting[t]++
			return t, true
		}
	}
	return "", false
}

// poolRoomLocked says whether one more member fits: under the sandbox cap
// with the real sandboxes and every member, and MemAvailable above
// prestartMinAvailable. Callers hold p.mu.
func (m *Manager) poolRoomLocked(p *prestartPool) bool {
	m.mu.Lock()
	n := len(m.sandboxes)
	m.mu.Unlock()
	if n+p.membersLocked() >= m.cfg.MaxSandboxes {
		return false
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return false
	}
	_, avail, err := parseMeminfo(string(b))
	return err == nil && avail >= prestartMinAvailable
}

// addMember ends a reserved start: the started sandbox joins the pool if
// it is still wanted and fits, else it is stopped. It reports whether it
// joined.
func (m *Manager) addMember(tpl string, sb *sandbox) bool {
	p := m.prestart()
	p.mu.Lock()
	p.starting[tpl]--
	if p.starting[tpl] <= 0 {
		delete(p.starting, tpl)
	}
	join := sb != nil && slices.Contains(p.templates, tpl) && len(p.ready[tpl]) < p.per
	if join {
		m.mu.Lock()
		join = len(m.sandboxes)+p.membersLocked() < m.cfg.MaxSandboxes
		m.mu.Unlock()
	}
	if join {
		p.ready[tpl] = append(p.ready[tpl], sb)
	}
	p.mu.Unlock()
	if sb != nil && !join {
		m.evictMembers([]*sandbox{sb})
		return false
	}
	if join {
		// A member whose init dies in the pool leaves it.
		go func() {
			select {
			case <-sb.initGone:
				if m.takeMember(sb) {
					m.log.Warn("pre-started sandbox died in the pool", "member", sb.id)
					m.evictMembers([]*sandbox{sb})
				}
			case <-sb.stopping:
			}
		}()
	}
	return join
}

// takeMember removes sb from the pool; false when it is not there (claimed
// or evicted already).
func (m *Manager) takeMember(sb *sandbox) bool {
	p := m.prestart()
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.ready[sb.tpl.Name]
	i := slices.Index(l, sb)
	if i < 0 {
		return false
	}
	p.ready[sb.tpl.Name] = slices.Delete(l, i, i+1)
	return true
}

// startMember starts one sandbox of tpl for the pool.
func (m *Manager) startMember(tpl string) (*sandbox, error) {
	p := m.prestart()
	p.mu.Lock()
	p.seq++
	id := prestartPrefix + strconv.FormatUint(p.seq, 10)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), prestartStartTimeout)
	defer cancel()
	// A member keeps its Go init until claimed (a claim stays fast);
	// applyClaim gives it the claim's idle time.
	sb := m.newSandbox(agentproto.SandboxSpec{ID: id, Template: tpl, Limits: withDefaults(agentproto.Limits{}), InitIdleMillis: -1}, time.Now())
	if err := m.start(ctx, sb, sb.created); err != nil {
		m.discard(sb)
		return nil, err
	}
	return sb, nil
}

// evictForRoom stops one ready member (the template with the most first)
// when the real sandboxes and the members fill the cap, so a create gets
// its room.
func (m *Manager) evictForRoom() {
	p := m.prestart()
	p.mu.Lock()
	m.mu.Lock()
	full := len(m.sandboxes)+p.membersLocked() >= m.cfg.MaxSandboxes
	m.mu.Unlock()
	var victim *sandbox
	if full {
		best := ""
		for t, l := range p.ready {
			if len(l) > 0 && (best == "" || len(l) > len(p.ready[best])) {
				best = t
			}
		}
		if best != "" {
			l := p.ready[best]
			victim = l[len(l)-1]
			p.ready[best] = l[:len(l)-1]
		}
	}
	p.mu.Unlock()
	if victim != nil {
		m.log.Info("evict pre-started sandbox for a create", "member", victim.id)
		m.evictMembers([]*sandbox{victim})
	}
}

// evictTemplate stops the members of a template the host releases, and
// stops pooling it. It fails while one is starting.
func (m *Manager) evictTemplate(name string) error {
	p := m.prestart()
	p.mu.Lock()
	p.templates = slices.DeleteFunc(p.templates, func(t string) bool { return t == name })
	victims := p.ready[name]
	delete(p.ready, name)
	starting := p.starting[name]
	p.mu.Unlock()
	m.evictMembers(victims)
	if starting > 0 {
		return fmt.Errorf("release template %s: %w: a pre-started sandbox is starting from it", name, agentproto.ErrConflict)
	}
	return nil
}

// poolTemplate has templates a create uses join the pool (a built-in one
// only: the host hot-unplugs tenant templates), and wakes the filler.
func (m *Manager) poolTemplate(spec agentproto.SandboxSpec) {
	p := m.prestart()
	p.mu.Lock()
	if p.per > 0 && !spec.TemplateHotplugged && !slices.Contains(p.templates, spec.Template) &&
		len(p.templates) < agentproto.MaxPrestartTemplates {
		p.templates = append(p.templates, spec.Template)
	}
	on := p.per > 0
	p.mu.Unlock()
	if on {
		p.kick()
	}
}

// prestartCount is the pool's members, for Stats.
func (m *Manager) prestartCount() int {
	p := m.prestart()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.membersLocked()
}

// claimable says whether a pooled sandbox can take spec at claim time:
// volumes are bound when crun starts a sandbox, so a spec with any is
// created fresh.
func claimable(spec agentproto.SandboxSpec) bool {
	return len(spec.Volumes) == 0
}

// claim serves a create from the pool: false (and nothing changed) when the
// pool has no member for it or the claim failed (the member is gone then).
func (m *Manager) claim(ctx context.Context, spec agentproto.SandboxSpec) (agentproto.SandboxInfo, bool) {
	if !claimable(spec) {
		return agentproto.SandboxInfo{}, false
	}
	p := m.prestart()
	t0 := time.Now()
	// Lock order: p.mu, then m.mu (poolRoomLocked), never both here.
	p.mu.Lock()
	l := p.ready[spec.Template]
	if len(l) == 0 {
		p.mu.Unlock()
		return agentproto.SandboxInfo{}, false
	}
	sb := l[0]
	p.ready[spec.Template] = l[1:]
	p.mu.Unlock()
	member := sb.id
	m.mu.Lock()
	if _, ok := m.sandboxes[spec.ID]; ok || len(m.sandboxes) >= m.cfg.MaxSandboxes {
		m.mu.Unlock()
		p.mu.Lock()
		p.ready[spec.Template] = append(p.ready[spec.Template], sb)
		p.mu.Unlock()
		return agentproto.SandboxInfo{}, false // the fresh path says why
	}
	// Only this create holds the member now: its fields change before it
	// is visible under the host's id.
	sb.mu.Lock()
	sb.id, sb.spec, sb.state, sb.prestarted = spec.ID, spec, agentproto.SandboxCreating, true
	sb.created, sb.lastActive = t0, t0
	sb.mu.Unlock()
	m.sandboxes[spec.ID] = sb
	m.mu.Unlock()
	defer p.kick()

	if err := m.applyClaim(ctx, sb); err != nil {
		m.log.Warn("claim pre-started sandbox: falling back to a fresh create", "sandbox", spec.ID, "member", member, "err", err)
		m.stop(sb, agentproto.ReasonDestroyed)
		m.mu.Lock()
		if m.sandboxes[spec.ID] == sb {
			delete(m.sandboxes, spec.ID)
		}
		m.mu.Unlock()
		return agentproto.SandboxInfo{}, false
	}
	p.mu.Lock()
	p.claimed++
	p.mu.Unlock()
	sb.mu.Lock()
	sb.state = agentproto.SandboxRunning
	sb.startup = agentproto.Startup{Ready: time.Since(t0)}
	sb.lastActive = time.Now()
	sb.mu.Unlock()
	go m.supervise(sb)
	info := sb.info()
	m.log.Info("sandbox created", "sandbox", sb.id, "template", spec.Template, "prestarted", member, "ready", info.Startup.Ready)
	return info, true
}

// applyClaim gives a pool member the claim's limits, disk sizes, CA,
// hostname and env.
func (m *Manager) applyClaim(ctx context.Context, sb *sandbox) error {
	spec := sb.spec
	select {
	case <-sb.initGone:
		return errors.New("its init is gone")
	default:
	}
	if err := setCgroupLimits(sb.cgroup, spec.Limits, sb.tpl.dev); err != nil {
		return err
	}
	if err := m.resizeClaim(sb); err != nil {
		return err
	}
	caEnv, err := installCA(sb.rootfs, spec.CAPEM)
	if err != nil {
		return err
	}
	if spec.Hostname != "" && spec.Hostname != "sandbox" {
		if err := setHostname(sb.initPID, spec.Hostname); err != nil {
			return err
		}
	}
	sb.claimEnv = append(caEnv, spec.Env...)
	if err := m.setInitIdle(sb); err != nil {
		return err
	}
	return ctx.Err()
}

// setCgroupLimits writes the limits a fresh sandbox's OCI config sets
// (bundle.go ociConfig) into a running sandbox's cgroup.
func setCgroupLimits(cg string, l agentproto.Limits, dev devNum) error {
	cpu := "max " + strconv.Itoa(cpuPeriod)
	if l.VCPUs > 0 {
		cpu = fmt.Sprintf("%d %d", int64(l.VCPUs*cpuPeriod+0.5), cpuPeriod)
	}
	files := [][2]string{
		{"memory.max", strconv.FormatInt(int64(l.MemoryMiB)<<20, 10)},
		{"memory.swap.max", "0"},
		{"pids.max", strconv.Itoa(l.PidsMax)},
		{"cpu.max", cpu},
	}
	if io := l.IO; io != nil && (io.ReadBPS > 0 || io.ReadIOPS > 0) {
		v := fmt.Sprintf("%d:%d", dev.Major, dev.Minor)
		if io.ReadBPS > 0 {
			v += " rbps=" + strconv.FormatUint(io.ReadBPS, 10)
		}
		if io.ReadIOPS > 0 {
			v += " riops=" + strconv.FormatUint(io.ReadIOPS, 10)
		}
		files = append(files, [2]string{"io.max", v})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(cg, f[0]), []byte(f[1]), 0); err != nil {
			return fmt.Errorf("claim: set %s to %s: %w", f[0], f[1], err)
		}
	}
	return nil
}

// resizeClaim gives the writable layer and /workspace the claim's sizes:
// the quotas of their scratch-disk projects, or the sizes of their tmpfs.
func (m *Manager) resizeClaim(sb *sandbox) error {
	l := sb.spec.Limits
	if sb.scratchDir != "" {
		for i, mib := range []int{l.DiskMiB, l.WorkspaceMiB} {
			if err := m.scratch.setQuota(sb.projects[i], uint64(mib)<<20/quotaBlockBytes, uint64(inodesFor(mib))); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
		}
		return nil
	}
	for _, r := range []struct {
		dir string
		mib int
	}{{filepath.Join(sb.dir, "scratch"), l.DiskMiB}, {filepath.Join(sb.rootfs, workspaceDir), l.WorkspaceMiB}} {
		opts := fmt.Sprintf("size=%dm,nr_inodes=%d", r.mib, inodesFor(r.mib))
		if err := unix.Mount("", r.dir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("claim: resize %s to %s: %w", r.dir, opts, err)
		}
	}
	return nil
}

// setHostname sets the hostname in the UTS namespace of pid, from a thread
// that enters it and ends with the goroutine.
func setHostname(pid int, name string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread leaves the agent's UTS namespace
		ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/uts", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("claim: sandbox uts namespace: %w", err)
			return
		}
		defer unix.Close(ns)
		if err := unix.Setns(ns, unix.CLONE_NEWUTS); err != nil {
			errc <- fmt.Errorf("claim: enter sandbox uts namespace: %w", err)
			return
		}
		if err := unix.Sethostname([]byte(name)); err != nil {
			errc <- fmt.Errorf("claim: sethostname: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// execEnv is what a command of sb adds to its init's environment: the
// claim's env (a claimed sandbox's init started without it), then the
// command's own.
func (sb *sandbox) execEnv(env []string) []string {
	if len(sb.claimEnv) == 0 {
		return env
	}
	return append(slices.Clip(sb.claimEnv), env...)
}

// hostID is the sandbox's id under the sandbox's lock: a pool member takes
// the host's id when claimed.
func (sb *sandbox) hostID() string {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.id
}
