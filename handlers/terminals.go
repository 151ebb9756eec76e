package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/terminal"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/views"
)

// terminalService returns the terminal service.
// Kept so its call sites stay as they are; every service is required
// (handlers.New), so it never fails.
func (h *Handlers) terminalService() (*terminal.Service, error) { return h.terms, nil }

func terminalJSON(s terminal.Session, st *terminal.State) api.Terminal {
	out := api.Terminal{
		ID: s.ID, SandboxID: s.SandboxID, OpenedBy: s.OpenedByName, Command: s.Argv(), Cols: s.Cols, Rows: s.Rows,
		StartedAt: s.StartedAt.UTC().Format(timeJSON), EndedAt: timePtr(s.EndedAt), EndReason: s.EndReason, ExitCode: s.ExitCode,
		BytesOut: s.BytesOut, BytesIn: s.BytesIn, RecordInput: s.RecordInput, RecordingBytes: s.RecordingBytes, Dropped: s.Dropped,
		RecordingTruncated: s.RecordingTruncated, TruncatedBytes: s.TruncatedBytes, WatchersCut: s.WatchersCut, Live: s.Live(),
	}
	if out.Command == nil {
		out.Command = []string{}
	}
	if s.Recording != "" {
		out.RecordingURL = "/api/v1/terminals/" + s.ID + "/cast"
	}
	if st != nil {
		d := st.Driver
		out.Driver, out.Watchers, out.Requests, out.BytesOut = &d, st.Watchers, st.Requests, st.Output
	}
	return out
}

// APITerminals lists the tenant's terminal sessions, live ones first:
// GET /api/v1/terminals[?sandbox=ID].
func (h *Handlers) APITerminals(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	tenantID, sandboxID := CallerOf(c).Tenant.ID, c.QueryParam("sandbox")
	list, err := svc.Sessions(c.Request().Context(), tenantID, sandboxID)
	if err != nil {
		return err
	}
	live := map[string]terminal.State{}
	for _, l := range svc.Live(tenantID, sandboxID) {
		live[l.ID] = l.Now
	}
	out := make([]api.Terminal, 0, len(list))
	for _, s := range list {
		var st *terminal.State
		if x, ok := live[s.ID]; ok {
			st = &x
		}
		out = append(out, terminalJSON(s, st))
	}
	return c.JSON(http.StatusOK, api.TerminalList{Terminals: out})
}

// APITerminal shows one session: GET /api/v1/terminals/:id.
func (h *Handlers) APITerminal(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	tenantID := CallerOf(c).Tenant.ID
	s, err := svc.Session(c.Request().Context(), tenantID, c.Param("id"))
	if err != nil {
		return err
	}
	var st *terminal.State
	if x, ok := svc.LiveState(tenantID, s.ID); ok {
		st = &x
	}
	return c.JSON(http.StatusOK, terminalJSON(s, st))
}

// TerminalCast sends a session's recording, asciicast v2 (a live session's
// so far): GET /api/v1/terminals/:id/cast.
func (h *Handlers) TerminalCast(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	f, s, err := svc.OpenRecording(c.Request().Context(), CallerOf(c).Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	name := "terminal-" + s.ID + ".cast"
	hdr := c.Response().Header()
	hdr.Set(echo.HeaderContentType, "application/x-asciicast")
	hdr.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	http.ServeContent(c.Response(), c.Request(), name, s.StartedAt, f)
	return nil
}

// TerminalSocket is a terminal over WebSocket: GET
// /api/v1/sandboxes/:id/terminal opens a new session in the sandbox and
// drives it; ?session=ID joins a live one (driving if the caller holds
// control), ?watch=1 joins read-only, ?offset=N resumes after the N output
// bytes already seen, ?cols=&rows= size a new terminal, ?cmd= (repeated)
// runs a command instead of the shell. Everything is checked before the
// upgrade, so refusals are ordinary problem documents: the route table
// requires terminals.watch, and terminals.drive to drive; the Origin must
// be this server's own.
func (h *Handlers) TerminalSocket(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	ctx, r, cl := c.Request().Context(), c.Request(), CallerOf(c)
	q := r.URL.Query()
	sandboxID, sessionID := c.Param("id"), q.Get("session")
	// The sandbox first: another tenant's is not found whatever the query.
	if err := svc.CheckSandbox(ctx, cl.Tenant.ID, sandboxID); err != nil && (sessionID == "" || !errors.Is(err, errdefs.ErrConflict)) {
		return err
	}
	// Driving (no ?watch=1) needs terminals.drive: the route table checks
	// it before this handler runs (web.Route.Also).
	watch := q.Get("watch") == "1" || q.Get("watch") == "true"
	canDrive := tenants.Can(cl.Role, tenants.PermTerminalsDrive)
	if !websocket.IsWebSocketUpgrade(r) {
		return &errdefs.MalformedError{Field: "Upgrade", Detail: "this endpoint speaks WebSocket: connect with a WebSocket client"}
	}
	if !h.sameOrigin(r) {
		return fmt.Errorf("%w: a page of another site may not open this server's terminals (Origin %q)", errdefs.ErrForbidden, r.Header.Get("Origin"))
	}
	offset := int64(-1)
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return errdefs.Invalid("offset", "number", "the count of output bytes seen: a whole number of at least 0")
		}
	}
	actor := cl.Actor(c)
	opened := false
	if sessionID == "" {
		req := terminal.OpenRequest{Argv: q["cmd"]}
		if req.Cols, err = size(q.Get("cols"), "cols"); err != nil {
			return err
		}
		if req.Rows, err = size(q.Get("rows"), "rows"); err != nil {
			return err
		}
		s, err := svc.Open(ctx, actor, cl.Tenant.ID, sandboxID, req)
		if err != nil {
			return err
		}
		sessionID, offset, opened = s.ID, 0, true
	}
	client, err := svc.Join(ctx, actor, cl.Tenant.ID, sandboxID, sessionID, terminal.JoinRequest{Drive: !watch, CanDrive: canDrive, Offset: offset})
	if err != nil {
		if opened {
			_ = svc.End(cl.Tenant.ID, sessionID, "its opener could not connect: "+err.Error())
		}
		return err
	}
	up := websocket.Upgrader{
		ReadBufferSize: 4 << 10, WriteBufferSize: 32 << 10, HandshakeTimeout: 10 * time.Second,
		CheckOrigin: h.sameOrigin,
	}
	conn, err := up.Upgrade(c.Response(), r, nil)
	if err != nil {
		// The upgrader answered the client already.
		client.Leave()
		h.log.Info("terminal upgrade failed", "session", sessionID, "err", err)
		return nil
	}
	terminal.Serve(ctx, conn, client, h.log)
	return nil
}

func size(v, field string) (uint16, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > terminal.MaxSize {
		return 0, errdefs.Invalid(field, "range", fmt.Sprintf("a whole number from 1 to %d", terminal.MaxSize))
	}
	return uint16(n), nil
}

// SameOrigin is sameOrigin, for the endpoints web serves outside the route
// table (MCPPath).
func (h *Handlers) SameOrigin(r *http.Request) bool { return h.sameOrigin(r) }

// sameOrigin reports whether a browser request comes from a page of this
// server (the public URL; the Host it was reached at when none is set).
// Clients that are not browsers send no Origin and carry no ambient
// credentials worth hijacking.
func (h *Handlers) sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	o, err := url.Parse(origin)
	if err != nil {
		return false
	}
	want := &url.URL{Scheme: "http", Host: r.Host}
	if r.TLS != nil {
		want.Scheme = "https"
	}
	if h.cfg.PublicURL != "" {
		if want, err = url.Parse(h.cfg.PublicURL); err != nil {
			return false
		}
	}
	return strings.EqualFold(o.Scheme, want.Scheme) && strings.EqualFold(o.Host, want.Host)
}

// --- Pages ---

// liveRows are the live sessions as the viewer me (the name the terminal
// shows for the caller) sees them.
func liveRows(ls []terminal.LiveSession, me string) []views.TerminalLiveRow {
	out := make([]views.TerminalLiveRow, 0, len(ls))
	for _, l := range ls {
		out = append(out, views.TerminalLiveRow{
			ID: l.ID, SandboxID: l.SandboxID, OpenedBy: l.OpenedByName, Command: l.Argv(), Driver: l.Now.Driver,
			DriverConnected: l.Now.Connected, Watchers: l.Now.Watchers, Requests: l.Now.Requests, StartedAt: l.StartedAt,
			BytesOut: l.Now.Output, Cols: int(l.Now.Cols), Rows: int(l.Now.Rows),
			Mine: me != "" && l.Now.Connected && l.Now.Driver == me,
		})
	}
	return out
}

// terminalName is how the terminals name the caller (as the hub does: the
// actor's name, its id when it has none).
func terminalName(c echo.Context) string {
	a := CallerOf(c).Actor(c)
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}

func recordingRow(s terminal.Session) views.TerminalRecordingRow {
	r := views.TerminalRecordingRow{
		ID: s.ID, SandboxID: s.SandboxID, OpenedBy: s.OpenedByName, Command: s.Argv(), StartedAt: s.StartedAt, EndedAt: s.EndedAt,
		EndReason: s.EndReason, BytesOut: s.BytesOut, RecordingBytes: s.RecordingBytes, Dropped: s.Dropped, WatchersCut: s.WatchersCut,
		Truncated: s.RecordingTruncated, RecordedInput: s.RecordInput, Purged: s.PurgedAt != nil, ExpiresAt: s.ExpiresAt(),
	}
	if s.ExitCode != nil {
		r.ExitCode = strconv.Itoa(*s.ExitCode)
	}
	return r
}

func (h *Handlers) liveList(c echo.Context, sandboxID, pollURL string) views.TerminalLiveList {
	cl := CallerOf(c)
	l := views.TerminalLiveList{PollURL: pollURL, CanDrive: tenants.Can(cl.Role, tenants.PermTerminalsDrive), Empty: "No live terminal."}
	if h.terms != nil {
		l.Rows = liveRows(h.terms.Live(cl.Tenant.ID, sandboxID), terminalName(c))
	}
	return l
}

// TerminalsPage lists live terminals, sandboxes to open one in, and the
// recordings: GET /terminals.
func (h *Handlers) TerminalsPage(c echo.Context) error {
	ctx, cl := c.Request().Context(), CallerOf(c)
	v := views.TerminalsView{Live: h.liveList(c, "", liveURL("")), CanDrive: tenants.Can(cl.Role, tenants.PermTerminalsDrive)}
	svc, err := h.terminalService()
	if err != nil {
		v.Unavailable = err.Error()
		return render(c, http.StatusOK, views.Terminals(h.page(c, "Terminals", views.NavTerminals), v))
	}
	list, err := svc.Sessions(ctx, cl.Tenant.ID, "")
	if err != nil {
		return err
	}
	for _, s := range list {
		if !s.Live() {
			v.Recordings = append(v.Recordings, recordingRow(s))
		}
	}
	if h.sbx != nil {
		sbs, err := h.sbx.List(ctx, cl.Tenant.ID)
		if err != nil {
			return err
		}
		for _, sb := range sbs {
			if sb.State == sandbox.StateRunning {
				v.Sandboxes = append(v.Sandboxes, views.TerminalSandbox{ID: sb.ID, Template: sb.Template, CreatedBy: sb.CreatedByName, CreatedAt: sb.CreatedAt})
			}
		}
	}
	return render(c, http.StatusOK, views.Terminals(h.page(c, "Terminals", views.NavTerminals), v))
}

// TerminalsLive is the "live now" list alone, polled by the pages:
// GET /terminals/live[?sandbox=ID].
func (h *Handlers) TerminalsLive(c echo.Context) error {
	sandboxID := c.QueryParam("sandbox")
	l := h.liveList(c, sandboxID, liveURL(sandboxID))
	if sandboxID != "" {
		l.Empty = noLiveInSandbox
	}
	return render(c, http.StatusOK, views.TerminalLiveFragment(l))
}

const noLiveInSandbox = "Nobody has a terminal open in this sandbox."

func liveURL(sandboxID string) string {
	if sandboxID == "" {
		return "/terminals/live"
	}
	return "/terminals/live?sandbox=" + url.QueryEscape(sandboxID)
}

// SandboxTerminalPage is a sandbox's terminal: a new session for those who
// may drive, its live sessions to watch: GET /sandboxes/:id/terminal.
func (h *Handlers) SandboxTerminalPage(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	cl, id := CallerOf(c), c.Param("id")
	v := views.TerminalView{SandboxID: id, SocketURL: "/api/v1/sandboxes/" + id + "/terminal",
		CanDrive: tenants.Can(cl.Role, tenants.PermTerminalsDrive), Live: h.liveList(c, id, liveURL(id))}
	v.Live.Empty = noLiveInSandbox
	if err := svc.CheckSandbox(c.Request().Context(), cl.Tenant.ID, id); err != nil {
		if !errors.Is(err, errdefs.ErrConflict) {
			return err
		}
		v.Unavailable = "No terminal can be opened: " + err.Error()
	}
	return render(c, http.StatusOK, views.SandboxTerminal(h.page(c, "Terminal", views.NavTerminals), v))
}

// TerminalPage is one session: live to join (watching, or driving with
// control), ended to replay: GET /terminals/:id.
func (h *Handlers) TerminalPage(c echo.Context) error {
	svc, err := h.terminalService()
	if err != nil {
		return err
	}
	cl := CallerOf(c)
	s, err := svc.Session(c.Request().Context(), cl.Tenant.ID, c.Param("id"))
	if err != nil {
		return err
	}
	canDrive := tenants.Can(cl.Role, tenants.PermTerminalsDrive)
	v := views.TerminalView{SandboxID: s.SandboxID, SessionID: s.ID, SocketURL: "/api/v1/sandboxes/" + s.SandboxID + "/terminal",
		Watch: !canDrive, CanDrive: canDrive, CastURL: "/api/v1/terminals/" + s.ID + "/cast", Recording: recordingRow(s)}
	title := "Terminal"
	if _, live := svc.LiveState(cl.Tenant.ID, s.ID); !live {
		v.Replay, title = true, "Recording"
		if s.Live() {
			// Held by another server of this deployment: what is recorded
			// so far replays.
			v.Recording.EndReason = "still live on another server"
		}
	}
	return render(c, http.StatusOK, views.TerminalPage(h.page(c, title+" "+shortID(s.ID), views.NavTerminals), v))
}

// sandboxTerminals is the terminal part of a sandbox's page: its
// sessions, newest first, with who drives the live ones now (for those who
// may watch terminals; nothing for the others).
func (h *Handlers) sandboxTerminals(c echo.Context, sandboxID string) (views.SandboxTerminals, error) {
	cl := CallerOf(c)
	v := views.SandboxTerminals{Visible: tenants.Can(cl.Role, tenants.PermTerminalsWatch), CanDrive: tenants.Can(cl.Role, tenants.PermTerminalsDrive)}
	if !v.Visible || h.terms == nil {
		return v, nil
	}
	list, err := h.terms.Sessions(c.Request().Context(), cl.Tenant.ID, sandboxID)
	if err != nil {
		return v, err
	}
	live := map[string]terminal.State{}
	for _, l := range h.terms.Live(cl.Tenant.ID, sandboxID) {
		live[l.ID] = l.Now
	}
	me, now := terminalName(c), h.clock()
	for _, s := range list {
		r := views.SandboxTerminalRow{ID: s.ID, OpenedBy: s.OpenedByName, Command: s.Argv(), Live: s.Live(), StartedAt: s.StartedAt,
			BytesOut: s.BytesOut, EndReason: s.EndReason, Purged: s.PurgedAt != nil}
		if s.EndedAt != nil {
			r.Duration = s.EndedAt.Sub(s.StartedAt)
		} else {
			r.Duration = now.Sub(s.StartedAt)
		}
		if s.ExitCode != nil {
			r.ExitCode = strconv.Itoa(*s.ExitCode)
		}
		if st, ok := live[s.ID]; ok {
			r.Driver, r.BytesOut, r.Mine = termDriverName(st), st.Output, me != "" && st.Connected && st.Driver == me
		}
		v.Rows = append(v.Rows, r)
	}
	return v, nil
}

func termDriverName(st terminal.State) string {
	switch {
	case st.Driver == "":
		return "nobody"
	case !st.Connected:
		return st.Driver + " (disconnected)"
	}
	return st.Driver
}
