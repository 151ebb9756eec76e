package web

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Body read deadlines: a client must send its body at a reasonable pace, or
// the server stops reading and drops the connection (a slow-loris body
// would otherwise hold a connection and a goroutine for ever).
const (
	// DefaultBodyTimeout is how long any body may take, plus its size at
	// DefaultBodyMinRate.
	DefaultBodyTimeout = time.Minute
	// DefaultBodyMinRate is the slowest pace (bytes per second) a large
	// body (a sandbox file upload) may keep beyond the timeout.
	DefaultBodyMinRate = 64 << 10
)

// errBodyTimeout is a body that did not arrive in time: 408.
var errBodyTimeout = echo.NewHTTPError(http.StatusRequestTimeout, "the request body did not arrive in time")

// bodyDeadline sets a read deadline on requests that have a body: the
// body must arrive within BodyTimeout, plus the time its size takes at
// BodyMinRate. Requests without a body (every GET, so WebSocket upgrades
// and Server-Sent Events streams among them) get none: their connection
// then belongs to the handler. Once the body has been read to its end the
// deadline is gone, so a long response (a streamed exec) is not cut.
func (s *Server) bodyDeadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Body == nil || req.Body == http.NoBody || (req.ContentLength == 0 && len(req.TransferEncoding) == 0) || longLived(req) {
			return next(c)
		}
		b := &deadlineBody{ReadCloser: req.Body, rc: http.NewResponseController(c.Response()),
			start: time.Now(), timeout: s.cfg.BodyTimeout, rate: s.cfg.BodyMinRate}
		if err := b.extend(); err != nil {
			// A writer without deadlines (not a network connection): nothing
			// to bound.
			return next(c)
		}
		req.Body = b
		return next(c)
	}
}

// longLived reports a WebSocket upgrade or an event stream: exempt,
// whatever they carry.
func longLived(req *http.Request) bool {
	return strings.EqualFold(req.Header.Get("Upgrade"), "websocket") || strings.Contains(req.Header.Get("Accept"), "text/event-stream")
}

// deadlineBody moves the connection's read deadline as the body arrives.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	start    time.Time
	timeout  time.Duration
	rate     int64
	read     int64
	deadline time.Time
	done     bool
}

// extend sets the deadline the bytes read so far allow.
func (b *deadlineBody) extend() error {
	d := b.start.Add(b.timeout + time.Duration(b.read)*time.Second/time.Duration(b.rate))
	if !d.After(b.deadline) {
		return nil
	}
	b.deadline = d
	return b.rc.SetReadDeadline(d)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	switch {
	case b.done:
	case errors.Is(err, io.EOF):
		// The body is in: net/http clears the read deadline itself as it
		// starts watching for the client going away, so the response may
		// take its time (TestBodyDeadlineLiftedOnceBodyIsIn holds it to that).
		b.done = true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, errBodyTimeout
	case n > 0:
		_ = b.extend()
	}
	return n, err
}
