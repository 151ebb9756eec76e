package agent

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// execBufferBytes bounds the output an exec keeps for a host that
// re-attaches (OpExecAttach): the latest bytes; older ones are dropped and
// the attach answer says so by its offset.
const execBufferBytes = 1 << 20

// execTable holds the execs that have an id: they outlive their host
// session for the grace the host asked for in hello.
type execTable struct {
	mu    sync.Mutex
	runs  map[string]*execRun
	grace time.Duration // 0: agentproto.DefaultExecGrace
}

// setGrace sets the grace of detached execs (the latest hello's): execs
// detached already get it too, counted from when they were detached.
func (t *execTable) setGrace(d time.Duration) {
	t.mu.Lock()
	t.grace = d
	if d <= 0 {
		d = agentproto.DefaultExecGrace
	}
	runs := make([]*execRun, 0, len(t.runs))
	for _, r := range t.runs {
		runs = append(runs, r)
	}
	t.mu.Unlock()
	for _, r := range runs {
		r.regrace(d)
	}
}

func (t *execTable) graceNow() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.grace <= 0 {
		return agentproto.DefaultExecGrace
	}
	return t.grace
}

func (t *execTable) add(r *execRun) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.runs == nil {
		t.runs = map[string]*execRun{}
	}
	if _, ok := t.runs[r.id]; ok {
		return fmt.Errorf("exec %s exists: %w", r.id, agentproto.ErrConflict)
	}
	t.runs[r.id] = r
	return nil
}

func (t *execTable) get(id string) *execRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[id]
}

// remove drops r (and not a newer exec of the same id).
func (t *execTable) remove(r *execRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.runs[r.id] == r {
		delete(t.runs, r.id)
	}
}

func (t *execTable) list() []agentproto.ExecInfo {
	t.mu.Lock()
	runs := make([]*execRun, 0, len(t.runs))
	for _, r := range t.runs {
		runs = append(runs, r)
	}
	t.mu.Unlock()
	out := make([]agentproto.ExecInfo, 0, len(runs))
	now := time.Now()
	for _, r := range runs {
		if !r.isDelivered() { // its exit reached a host: going
			out = append(out, r.info(now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// outFrame is output kept for a re-attach; off is the offset of its first
// byte among all output (stdout and stderr together).
type outFrame struct {
	off  int64
	ch   agentproto.Channel
	data []byte
}

// execRun is a running (or ended, not yet delivered) command and the output
// the host has not surely got. One host stream at a time is attached.
type execRun struct {
	id      string // empty: the exec dies with its stream
	sandbox string
	pid     int
	p       *spawned
	tty     bool
	limit   int
	// keep: a lost session or a closed stream detaches it, for as long as
	// its sandbox lives (agentproto.ExecRequest.Keep).
	keep bool
	// hostSignaled: a signal from the host (or a kill) ended it, if one did.
	hostSignaled atomic.Bool

	mu     sync.Mutex
	cond   *sync.Cond
	frames []outFrame
	start  int64 // offset of frames[0] (or end when empty)
	end    int64 // all output so far
	size   int
	exit   *agentproto.ExitStatus
	att    *attachment
	// detachedAt is when the last host stream was lost with its session;
	// zero while attached. cancelled: the host closed the stream (the exec
	// is being killed and goes once it ended).
	detachedAt time.Time
	cancelled  bool
	grace      *time.Timer
	expired    bool
	delivered  bool
}

// attachment is one host stream serving a run.
type attachment struct {
	st     net.Conn
	cursor int64 // output sent on st up to here
}

func newExecRun(id, sandbox string, p *spawned, tty bool) *execRun {
	r := &execRun{id: id, sandbox: sandbox, pid: p.pid, p: p, tty: tty, limit: execBufferBytes}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// kill kills the command's process group.
func (r *execRun) kill() {
	r.hostSignaled.Store(true)
	killSpawned(r.p)
}

// write keeps output. While a host is attached, output it has not been
// sent yet is never dropped: write waits (the command blocks on its pipe,
// as it would on a slow host) until the host took it. Detached, the oldest
// output goes first.
func (r *execRun) write(ch agentproto.Channel, p []byte) {
	data := append([]byte(nil), p...)
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.size+len(data) > r.limit {
		if len(r.frames) > 0 && (r.att == nil || r.frames[0].off+int64(len(r.frames[0].data)) <= r.att.cursor) {
			r.size -= len(r.frames[0].data)
			r.frames[0] = outFrame{}
			r.frames = r.frames[1:]
			if len(r.frames) > 0 {
				r.start = r.frames[0].off
			} else {
				r.start = r.end
			}
			continue
		}
		if r.att == nil {
			break
		}
		r.cond.Wait()
	}
	if len(r.frames) == 0 {
		r.start = r.end
	}
	r.frames = append(r.frames, outFrame{off: r.end, ch: ch, data: data})
	r.end += int64(len(data))
	r.size += len(data)
	r.cond.Broadcast()
}

// ended records how the command ended. It returns whether nobody can take
// the status any more (no attachment and no re-attach possible).
func (r *execRun) ended(st agentproto.ExitStatus) (orphan bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exit = &st
	r.cond.Broadcast()
	return r.att == nil && (r.id == "" || r.cancelled || r.expired)
}

// keptIn counts the kept execs of sandbox id.
func (t *execTable) keptIn(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.runs {
		if r.keep && r.sandbox == id {
			n++
		}
	}
	return n
}

// dropSandbox forgets the execs of sandbox id nobody is attached to: it is
// destroyed, so their exits (kept ones wait for a host) can never be taken.
// An attached one goes once its stream delivered the exit.
func (t *execTable) dropSandbox(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.runs {
		if r.sandbox != id {
			continue
		}
		r.mu.Lock()
		idle := r.att == nil
		r.mu.Unlock()
		if idle {
			delete(t.runs, k)
		}
	}
}

// serve sends output from a's cursor on, then the exit status. It returns
// true once the exit was sent, false when a stopped being attached or a
// send failed.
func (r *execRun) serve(a *attachment, send func(agentproto.Channel, []byte) error) bool {
	for {
		r.mu.Lock()
		for r.att == a && a.cursor >= r.end && r.exit == nil {
			r.cond.Wait()
		}
		if r.att != a {
			r.mu.Unlock()
			return false
		}
		var out []outFrame
		for _, f := range r.frames {
			fend := f.off + int64(len(f.data))
			if fend <= a.cursor {
				continue
			}
			if f.off < a.cursor {
				f.data = f.data[a.cursor-f.off:]
				f.off = a.cursor
			}
			out = append(out, f)
		}
		// The exit is set after the last output: with it, out is all of it.
		exit := r.exit
		r.mu.Unlock()
		for _, f := range out {
			if send(f.ch, f.data) != nil {
				return false
			}
			r.mu.Lock()
			a.cursor = f.off + int64(len(f.data))
			r.cond.Broadcast()
			r.mu.Unlock()
		}
		if exit != nil {
			// Marked first: a host that got the exit never sees the exec
			// listed after.
			r.mu.Lock()
			r.delivered = true
			r.mu.Unlock()
			if sendExit(send, *exit) != nil {
				r.mu.Lock()
				r.delivered = false
				r.mu.Unlock()
				return false
			}
			return true
		}
	}
}

// attach makes a the run's host stream from offset from on (clamped to
// what is kept) and returns the offset the output starts at. An earlier
// attachment is closed.
func (r *execRun) attach(a *attachment, from int64) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.expired || r.cancelled || r.delivered {
		return 0, fmt.Errorf("exec %s: %w", r.id, agentproto.ErrNotFound)
	}
	if from < 0 || from > r.end {
		return 0, fmt.Errorf("exec %s: offset %d past the output (%d bytes): %w", r.id, from, r.end, agentproto.ErrBadRequest)
	}
	if old := r.att; old != nil {
		old.st.Close()
	}
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	a.cursor = max(from, r.start)
	r.att, r.detachedAt = a, time.Time{}
	r.cond.Broadcast()
	return a.cursor, nil
}

// detach ends a's attachment. lost says its host session ended: with an id
// the run then waits grace for a re-attach (and expire runs after it);
// otherwise the command is killed.
func (r *execRun) detach(a *attachment, lost bool, grace time.Duration, expire func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.att != a {
		return // taken over by a newer attachment
	}
	r.att = nil
	r.cond.Broadcast()
	if r.keep {
		// Until it ends or its sandbox does: no grace.
		r.detachedAt = time.Now()
		return
	}
	if lost && r.id != "" {
		r.detachedAt = time.Now()
		r.grace = time.AfterFunc(grace, expire)
		return
	}
	r.cancelled = true
	if r.exit == nil {
		go r.kill()
	}
}

// expire ends a detached run whose grace passed: it is killed if it still
// runs, and forgotten. It reports whether it did (false: re-attached).
func (r *execRun) expire() (killed, did bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.att != nil || r.expired {
		return false, false
	}
	r.expired = true
	if r.exit == nil {
		go r.kill()
		return true, true
	}
	return false, true
}

// regrace moves a detached run's end to grace after it was detached.
func (r *execRun) regrace(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.grace != nil && !r.detachedAt.IsZero() {
		r.grace.Reset(max(time.Until(r.detachedAt.Add(grace)), 0))
	}
}

// isDelivered says the exit reached a host.
func (r *execRun) isDelivered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered
}

func (r *execRun) info(now time.Time) agentproto.ExecInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := agentproto.ExecInfo{ID: r.id, Sandbox: r.sandbox, PID: r.pid, Attached: r.att != nil,
		Exited: r.exit != nil, Output: r.end, Buffered: int64(r.size)}
	if r.exit != nil {
		st := *r.exit
		in.Exit = &st
	}
	if !r.detachedAt.IsZero() {
		in.DetachedFor = now.Sub(r.detachedAt)
	}
	return in
}
