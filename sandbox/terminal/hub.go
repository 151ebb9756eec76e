package terminal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// ErrEnded: the session has ended; nobody can join it any more.
var ErrEnded = fmt.Errorf("terminal session ended: %w", errdefs.ErrConflict)

// WebSocket close codes the hub asks for (RFC 6455).
const (
	CloseNormal      = 1000 // the session ended
	CloseGoingAway   = 1001 // the server shuts down
	ClosePolicy      = 1008 // a client broke the protocol
	CloseTryAgain    = 1013 // cut off for being too slow: resume from the offset
	defaultRingBytes = 256 << 10
)

// HubConfig configures a Hub. Zero values take the defaults noted.
type HubConfig struct {
	ID, Sandbox string
	// RingBytes is how much recent output is kept for late joiners and
	// resumes; default 256 KiB.
	RingBytes int
	// QueueBytes and QueueMessages bound what may wait for one client. A
	// watcher over either is cut off, so that it never slows the terminal;
	// the driver holds the terminal back instead (as a terminal does when
	// nobody reads it) for up to DriverStall, then it is cut off too.
	// Defaults 1 MiB, 1024 and 30 s.
	QueueBytes    int64
	QueueMessages int
	DriverStall   time.Duration
	// Recorder records the session; nil records nothing. The hub closes it.
	Recorder    *Recorder
	RecordInput bool
	Cols, Rows  uint16
	// Driver holds control from the start (the one who opened the
	// session), before connecting; zero for nobody.
	Driver audit.Actor
	Log    *slog.Logger
	Clock  clockwork.Clock // default the real clock
	// Explain may give a better reason than the exit status when the
	// process ended by itself (its sandbox was destroyed, say); "" keeps
	// the exit status.
	Explain func(exit *Exit, err error) string
	// OnControl is told when someone takes control (from names the
	// previous driver, "" for none). Called without the hub's lock.
	OnControl func(by audit.Actor, from string)
	// OnEnd is told once, when the session ended and its recording closed.
	OnEnd func(End)
	// Resume, when set, takes up a session that a stopped server left
	// (its process kept running): the hub starts part way through it.
	Resume *HubResume
}

// HubResume says where a resumed session's hub starts.
type HubResume struct {
	// Offset is where the PTY's first byte sits in the session's output;
	// output before RecordFrom is in the recording already and is not
	// recorded again. BytesIn is the input counted before.
	Offset, RecordFrom, BytesIn int64
	// Started is when the session started.
	Started time.Time
}

// End is how a session ended.
type End struct {
	Reason   string
	Exit     *Exit // nil when the process did not end by itself
	BytesOut int64 // terminal output
	BytesIn  int64 // keystrokes from drivers
	Cut      int   // clients cut off for being too slow
	Record   RecorderStats
	RecErr   error
	At       time.Time
}

// Message is what a client is sent: terminal data or a control message.
type Message struct {
	Data    []byte
	Control *Control
}

// Hub fans one terminal out to its clients: one driver, who may type and
// resize, and any number of watchers. Output goes into a ring buffer, the
// recorder and every client's bounded queue, never waiting for any of them.
type Hub struct {
	cfg     HubConfig
	pty     PTY
	started time.Time

	wmu sync.Mutex // one write to the terminal at a time, outside mu

	mu          sync.Mutex
	ring        *ring
	clients     map[*Client]struct{}
	driver      *Client // connected driver, nil if none
	driverActor string  // who holds control, connected or not; "" for nobody
	driverName  string
	cols, rows  uint16
	nextID      int64
	ended       bool
	endReason   string // asked for by End before the process went
	ending      string // told by Ending: why the process is about to go
	bytesIn     int64
	cut         int
	lastLeft    time.Time // when the last client left
	// presencePending: a presence message is due (see broadcastPresence).
	presencePending bool
	claimed         bool // someone held control once
	recordFrom      int64
	done            chan struct{}
	end             End
}

// NewHub starts fanning p out. The hub owns p from now on.
func NewHub(p PTY, cfg HubConfig) *Hub {
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = defaultRingBytes
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 1 << 20
	}
	if cfg.QueueMessages <= 0 {
		cfg.QueueMessages = 1024
	}
	cfg.QueueMessages = max(cfg.QueueMessages, 2) // a joiner's hello and screen
	if cfg.DriverStall <= 0 {
		cfg.DriverStall = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Cols == 0 || cfg.Rows == 0 {
		cfg.Cols, cfg.Rows = 80, 24
	}
	h := &Hub{
		cfg: cfg, pty: p, started: cfg.Clock.Now(), ring: newRing(cfg.RingBytes), clients: map[*Client]struct{}{},
		cols: cfg.Cols, rows: cfg.Rows, done: make(chan struct{}),
	}
	h.lastLeft = h.started
	if r := cfg.Resume; r != nil {
		h.ring = newRingAt(cfg.RingBytes, r.Offset)
		h.bytesIn, h.recordFrom = r.BytesIn, r.RecordFrom
		if !r.Started.IsZero() {
			h.started = r.Started
		}
	}
	if cfg.Driver.ID != "" {
		h.driverActor, h.driverName, h.claimed = cfg.Driver.ID, nameOf(cfg.Driver), true
	}
	go h.pump()
	return h
}

// ID is the session's id.
func (h *Hub) ID() string { return h.cfg.ID }

// Done is closed once the session has ended.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Ended returns how the session ended; only meaningful after Done.
func (h *Hub) Ended() End {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.end
}

// pump copies the terminal's output to everyone until it ends.
func (h *Hub) pump() {
	if op, ok := h.pty.(OutputPusher); ok {
		op.PushOutput(h.output)
	} else {
		h.read()
	}
	exit, err := h.pty.Wait()
	var ex *Exit
	if err == nil {
		ex = &exit
	}
	h.mu.Lock()
	ended, reason := h.ended, h.ending
	h.mu.Unlock()
	if ended {
		return // End was called: its reason stands
	}
	if reason == "" && h.cfg.Explain != nil {
		reason = h.cfg.Explain(ex, err)
	}
	if reason == "" {
		reason = exitReason(ex, err)
	}
	h.finish(reason, ex)
}

// read copies what the terminal prints to everyone until it ends.
func (h *Hub) read() {
	buf := make([]byte, 32<<10)
	for {
		n, err := h.pty.Read(buf)
		if n > 0 {
			h.output(buf[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				h.cfg.Log.Debug("terminal read ended", "session", h.cfg.ID, "err", err)
			}
			return
		}
	}
}

func exitReason(ex *Exit, err error) string {
	switch {
	case ex == nil && err != nil:
		return "the terminal was lost: " + err.Error()
	case ex == nil:
		return "the terminal closed"
	case ex.Signal != "":
		return "the process was killed by SIG" + ex.Signal
	case ex.Reason != "" && ex.Reason != "exited":
		return "the process ended (" + ex.Reason + ", exit code " + strconv.Itoa(ex.Code) + ")"
	}
	return "the process exited with code " + strconv.Itoa(ex.Code)
}

// output takes one read of the terminal.
func (h *Hub) output(p []byte) {
	data := append([]byte(nil), p...) // shared by every queue; never changed
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return
	}
	at := h.ring.end
	h.ring.write(data)
	if h.cfg.Recorder != nil {
		rec := data
		if skip := h.recordFrom - at; skip > 0 {
			// Recorded by the server that ran the session before.
			rec = data[min(skip, int64(len(data))):]
		}
		if len(rec) > 0 {
			h.cfg.Recorder.output(rec)
		}
	}
	m := Message{Data: data}
	var cut bool
	drv := h.driver
	for c := range h.clients {
		if c != drv {
			if cm, ok := c.unseen(m, at); ok && !h.deliver(c, cm) {
				cut = true
			}
		}
	}
	if cut {
		h.broadcastPresence()
	}
	if drv != nil {
		var ok bool
		if m, ok = drv.unseen(m, at); !ok {
			return
		}
	}
	if drv != nil && !h.offer(drv, m) {
		h.mu.Unlock()
		h.holdFor(drv, m)
		h.mu.Lock()
	}
}

// holdFor waits, holding the terminal back, until the driver has room for
// m, stops driving, leaves, or stalls for DriverStall. Called without mu.
func (h *Hub) holdFor(c *Client, m Message) {
	stall := h.cfg.Clock.NewTimer(h.cfg.DriverStall)
	defer stall.Stop()
	for {
		timeout := false
		select {
		case <-c.space:
		case <-stall.Chan():
			timeout = true
		}
		h.mu.Lock()
		switch {
		case c.gone || h.ended:
		case h.driver != c || timeout:
			// A watcher now, or stuck: the watchers' rule.
			if !h.deliver(c, m) {
				h.broadcastPresence()
			}
		case !h.offer(c, m):
			h.mu.Unlock()
			continue
		}
		h.mu.Unlock()
		return
	}
}

// offer queues m for c if it has room. Under mu.
func (h *Hub) offer(c *Client, m Message) bool {
	n := int64(len(m.Data))
	if q := c.queued.Load(); q > 0 && q+n > h.cfg.QueueBytes {
		return false
	}
	select {
	case c.out <- m:
		c.queued.Add(n)
		return true
	default:
		return false
	}
}

// deliver queues m for c, or cuts c off when its queue is full. Under mu.
func (h *Hub) deliver(c *Client, m Message) bool {
	if h.offer(c, m) {
		return true
	}
	h.cutOff(c)
	return false
}

func (h *Hub) cutOff(c *Client) {
	h.cut++
	h.cfg.Log.Info("terminal client cut off: too slow", "session", h.cfg.ID, "client", c.name, "queued_bytes", c.queued.Load())
	h.drop(c, CloseTryAgain, closeTooSlow+"resume with the last offset you saw", true)
}

// drop removes c. now closes its connection at once (what is queued is
// lost); otherwise what is queued is sent first. Under mu.
func (h *Hub) drop(c *Client, code int, reason string, now bool) {
	if c.gone {
		return
	}
	c.gone = true
	c.code, c.reason = code, reason
	delete(h.clients, c)
	if h.driver == c {
		h.driver = nil
	}
	if len(h.clients) == 0 {
		h.lastLeft = h.cfg.Clock.Now()
	}
	if now {
		close(c.quit)
	} else {
		close(c.out)
	}
	c.wake()
}

func (h *Hub) control(c *Client, ctl Control) {
	h.deliver(c, Message{Control: &ctl})
}

func (h *Hub) broadcast(ctl Control) {
	for c := range h.clients {
		h.control(c, ctl)
	}
}

// presence says who drives and who watches. Under mu.
func (h *Hub) presence() Control {
	ctl := Control{Type: MsgPresence, Driver: h.driverName}
	if h.driverActor != "" && h.driver == nil {
		ctl.Driver += " (disconnected)"
	}
	for c := range h.clients {
		if c != h.driver {
			ctl.Watchers = append(ctl.Watchers, c.name)
		}
		if c.requested {
			ctl.Requests = append(ctl.Requests, c.name)
		}
	}
	sort.Strings(ctl.Watchers)
	sort.Strings(ctl.Requests)
	return ctl
}

// broadcastPresence tells everyone who is on the session, soon: changes
// within presenceDelay go out as one message, so that a crowd joining
// does not send each member a message per joiner. Under mu.
func (h *Hub) broadcastPresence() {
	if h.presencePending || h.ended {
		return
	}
	h.presencePending = true
	h.cfg.Clock.AfterFunc(presenceDelay, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.presencePending = false
		if !h.ended {
			h.broadcast(h.presence())
		}
	})
}

// presenceDelay gathers presence changes into one message.
const presenceDelay = 200 * time.Millisecond

// JoinOptions say who joins and how.
type JoinOptions struct {
	Actor audit.Actor
	// CanDrive: the caller's role allows driving.
	CanDrive bool
	// Drive asks for control: granted when the caller holds it already (a
	// resumed connection) or nobody ever held it. Otherwise the client
	// watches and may request control, then take it.
	Drive bool
	// Offset is the offset of the first output byte wanted (the count of
	// bytes seen, when resuming); -1 means everything still held: the
	// current screen.
	Offset int64
}

// Join adds a client. Its queue starts with a hello and the output from
// the asked offset on (as much of it as is still held).
func (h *Hub) Join(o JoinOptions) (*Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return nil, ErrEnded
	}
	h.nextID++
	c := &Client{
		hub: h, id: h.nextID, Actor: o.Actor, name: nameOf(o.Actor), canDrive: o.CanDrive, role: RoleWatcher,
		out: make(chan Message, h.cfg.QueueMessages), quit: make(chan struct{}), space: make(chan struct{}, 1),
	}
	// Control goes only to whoever holds it (resuming), or to the first to
	// ask for it: once someone drove, it changes hands by request and
	// take alone.
	if o.Drive && o.CanDrive && (h.driverActor == o.Actor.ID || (h.driverActor == "" && !h.claimed)) {
		if old := h.driver; old != nil {
			// The same person again (a resumed or second connection): the
			// newest one drives.
			old.role = RoleWatcher
			h.control(old, Control{Type: MsgRole, Role: RoleWatcher})
			old.wake()
		}
		c.role, h.driver, h.driverActor, h.driverName, h.claimed = RoleDriver, c, o.Actor.ID, c.name, true
	}
	off := o.Offset
	if off < 0 {
		off = 0
	}
	data, from := h.ring.since(off)
	if h.cfg.Resume != nil && o.Offset > from && o.Offset-from <= resumeAhead {
		// Taken up from the agent, whose output is still arriving: the
		// client saw up to o.Offset, so it gets what follows, once.
		c.skipTo, from = o.Offset, o.Offset
	}
	missed := int64(0)
	if o.Offset >= 0 && from > o.Offset {
		missed = from - o.Offset
	}
	pres := h.presence()
	hello := Control{Type: MsgHello, Session: h.cfg.ID, Sandbox: h.cfg.Sandbox, Role: c.role, CanDrive: c.canDrive,
		Offset: &from, Missed: missed, Cols: h.cols, Rows: h.rows, Driver: pres.Driver, Requests: pres.Requests, By: c.name}
	hello.Watchers = pres.Watchers
	if c.role != RoleDriver {
		hello.Watchers = append(hello.Watchers, c.name)
		sort.Strings(hello.Watchers)
	}
	c.out <- Message{Control: &hello}
	if len(data) > 0 {
		c.out <- Message{Data: data}
		c.queued.Add(int64(len(data)))
	}
	h.clients[c] = struct{}{}
	h.broadcastPresence()
	return c, nil
}

// Ending says why the session's process is about to be killed from
// outside (its sandbox is being destroyed): when it then ends, that is
// the session's reason, not what the broken stream said. "" takes it back.
func (h *Hub) Ending(reason string) {
	h.mu.Lock()
	h.ending = reason
	h.mu.Unlock()
}

// End ends the session for everyone with reason, killing its process.
func (h *Hub) End(reason string) {
	h.mu.Lock()
	if h.endReason == "" {
		h.endReason = reason
	}
	h.mu.Unlock()
	h.finish(reason, nil)
}

// finish ends the session once: every client is told why and let go, the
// process is killed, the recording closed.
func (h *Hub) finish(reason string, exit *Exit) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended = true
	switch {
	case h.endReason != "":
		reason = h.endReason
	case h.ending != "":
		reason = h.ending
	}
	end := Control{Type: MsgEnd, Reason: reason}
	if exit != nil {
		code := exit.Code
		end.ExitCode = &code
	}
	for c := range h.clients {
		h.control(c, end)
		h.drop(c, CloseNormal, truncateReason(reason), false)
	}
	h.mu.Unlock()

	if err := h.pty.Close(); err != nil {
		h.cfg.Log.Debug("close terminal", "session", h.cfg.ID, "err", err)
	}
	e := End{Reason: reason, Exit: exit, At: h.cfg.Clock.Now()}
	if h.cfg.Recorder != nil {
		e.Record, e.RecErr = h.cfg.Recorder.Close()
	}
	h.mu.Lock()
	e.BytesOut, e.BytesIn, e.Cut = h.ring.end, h.bytesIn, h.cut
	h.end = e
	h.mu.Unlock()
	close(h.done)
	if h.cfg.OnEnd != nil {
		h.cfg.OnEnd(e)
	}
}

// truncateReason fits a close reason into a WebSocket close frame (123
// bytes) on a character boundary.
func truncateReason(s string) string {
	if len(s) <= 120 {
		return s
	}
	b, _ := splitUTF8([]byte(s[:120]))
	return string(b)
}

// State is a live session as its hub sees it.
type State struct {
	Driver     string // "" when nobody drives
	Connected  bool   // the driver is connected
	Watchers   []string
	Requests   []string
	Cols, Rows uint16
	Output     int64 // output bytes so far
	Started    time.Time
	Clients    int
	// IdleSince is when the last client left; zero while any is connected.
	IdleSince time.Time
}

// State says who is on the session now.
func (h *Hub) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.presence()
	st := State{Driver: h.driverName, Connected: h.driver != nil, Watchers: p.Watchers, Requests: p.Requests,
		Cols: h.cols, Rows: h.rows, Output: h.ring.end, Started: h.started, Clients: len(h.clients)}
	if h.driverActor == "" {
		st.Driver = ""
	}
	if len(h.clients) == 0 {
		st.IdleSince = h.lastLeft
	}
	return st
}

// Client is one connection to a session.
type Client struct {
	Actor    audit.Actor
	name     string
	hub      *Hub
	id       int64
	canDrive bool
	out      chan Message
	quit     chan struct{}
	queued   atomic.Int64  // data bytes queued and not yet sent
	space    chan struct{} // a send freed room, or the client changed

	// Under hub.mu.
	skipTo    int64 // output before this offset was seen already (see Join)
	role      string
	requested bool
	gone      bool
	code      int
	reason    string
}

// resumeAhead bounds how far past a taken-up hub's output a resuming
// client's offset may be (the agent holds at most 1 MiB).
const resumeAhead = 1 << 20

// unseen is m, output at offset at, without what c saw already; false
// when c saw all of it. Under hub.mu.
func (c *Client) unseen(m Message, at int64) (Message, bool) {
	if c.skipTo <= at {
		return m, true
	}
	k := c.skipTo - at
	if k >= int64(len(m.Data)) {
		return m, false
	}
	c.skipTo = 0
	return Message{Data: m.Data[k:]}, true
}

// Out delivers what to send, in order. It is closed once everything the
// client is owed was queued: then send a close frame with Closing's code
// and reason.
func (c *Client) Out() <-chan Message { return c.out }

// Kicked is closed when the client must be disconnected at once, without
// sending what is queued (it was too slow).
func (c *Client) Kicked() <-chan struct{} { return c.quit }

// Closing is the close code and reason once Out is closed or Kicked fired.
func (c *Client) Closing() (int, string) {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	return c.code, c.reason
}

// Sent tells the hub m went out, so its bytes no longer count against the
// client's queue.
func (c *Client) Sent(m Message) {
	c.queued.Add(-int64(len(m.Data)))
	c.wake()
}

func (c *Client) wake() {
	select {
	case c.space <- struct{}{}:
	default:
	}
}

// Role is the client's role now.
func (c *Client) Role() string {
	c.hub.mu.Lock()
	defer c.hub.mu.Unlock()
	return c.role
}

// errNotDriver refuses input and resizes from a watcher.
var errNotDriver = errors.New("you are watching: request control, then take it, to type")

// Input types p into the terminal if the client drives.
func (c *Client) Input(p []byte) error {
	h := c.hub
	h.mu.Lock()
	if h.ended || c.gone {
		h.mu.Unlock()
		return ErrEnded
	}
	if c.role != RoleDriver {
		h.mu.Unlock()
		return errNotDriver
	}
	h.bytesIn += int64(len(p))
	if h.cfg.RecordInput && h.cfg.Recorder != nil {
		h.cfg.Recorder.Input(p)
	}
	h.mu.Unlock()
	// Outside mu: a process that does not read its input must not stop
	// its output reaching anyone.
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, err := h.pty.Write(p); err != nil {
		return fmt.Errorf("type into terminal: %w", err)
	}
	return nil
}

// Control handles a control message from the client. An error is for the
// client only (it is told, the session goes on).
func (c *Client) Control(ctl Control) error {
	switch ctl.Type {
	case MsgResize:
		return c.resize(ctl.Cols, ctl.Rows)
	case MsgRequest, MsgTake, MsgRelease, MsgCancel:
		return c.handover(ctl.Type)
	}
	return fmt.Errorf("unknown control message %q", ctl.Type)
}

// MaxSize bounds a terminal's columns and rows.
const MaxSize = 1000

func (c *Client) resize(cols, rows uint16) error {
	if cols == 0 || rows == 0 || cols > MaxSize || rows > MaxSize {
		return fmt.Errorf("resize to %dx%d: columns and rows must be 1 to %d", cols, rows, MaxSize)
	}
	h := c.hub
	h.mu.Lock()
	if c.role != RoleDriver || c.gone {
		h.mu.Unlock()
		return errNotDriver
	}
	if h.cols == cols && h.rows == rows {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	h.wmu.Lock()
	err := h.pty.Resize(rows, cols)
	h.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("resize terminal: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cols, h.rows = cols, rows
	if h.cfg.Recorder != nil {
		h.cfg.Recorder.Resize(cols, rows)
	}
	h.broadcast(Control{Type: MsgResize, Cols: cols, Rows: rows})
	return nil
}

// handover runs the explicit change of driver: a watcher who may drive
// requests control (everyone sees it), then takes it; the driver may
// release it.
func (c *Client) handover(what string) error {
	h := c.hub
	h.mu.Lock()
	if c.gone {
		h.mu.Unlock()
		return ErrEnded
	}
	var (
		took bool
		from string
	)
	switch what {
	case MsgRequest:
		switch {
		case !c.canDrive:
			h.mu.Unlock()
			return errors.New("your role may watch this terminal, not drive it")
		case c.role == RoleDriver:
			h.mu.Unlock()
			return errors.New("you are driving already")
		}
		c.requested = true
		h.broadcast(Control{Type: MsgRequested, By: c.name})
	case MsgCancel:
		c.requested = false
	case MsgTake:
		switch {
		case c.role == RoleDriver:
			h.mu.Unlock()
			return nil
		case !c.requested || !c.canDrive:
			h.mu.Unlock()
			return errors.New("request control first: everyone on the terminal sees who asks")
		}
		if old := h.driver; old != nil {
			old.role = RoleWatcher
			h.control(old, Control{Type: MsgRole, Role: RoleWatcher, By: c.name})
			old.wake()
		}
		from = h.driverName
		if h.driverActor == "" {
			from = ""
		}
		c.requested, c.role = false, RoleDriver
		h.driver, h.driverActor, h.driverName = c, c.Actor.ID, c.name
		h.control(c, Control{Type: MsgRole, Role: RoleDriver})
		took = true
	case MsgRelease:
		if c.role != RoleDriver {
			h.mu.Unlock()
			return errors.New("you are not driving")
		}
		c.role = RoleWatcher
		h.driver, h.driverActor, h.driverName = nil, "", ""
		h.control(c, Control{Type: MsgRole, Role: RoleWatcher})
		c.wake()
	}
	h.broadcastPresence()
	h.mu.Unlock()
	if took && h.cfg.OnControl != nil {
		h.cfg.OnControl(c.Actor, from)
	}
	return nil
}

// Leave disconnects the client. Control stays with a driver who leaves,
// so a dropped connection resumes driving.
func (c *Client) Leave() {
	h := c.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.gone {
		return
	}
	h.drop(c, CloseNormal, "left", true)
	h.broadcastPresence()
}

// nameOf is how a person or token is shown to the others on a terminal.
func nameOf(a audit.Actor) string {
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}
