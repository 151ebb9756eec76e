package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// SocketURL is the WebSocket URL of a sandbox's terminal on the server at
// base (http:// or https://), with query q.
func SocketURL(base, sandboxID string, q url.Values) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/") + "/api/v1/sandboxes/" + url.PathEscape(sandboxID) + "/terminal")
	if err != nil {
		return "", fmt.Errorf("terminal url: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("terminal url: %q is not an http(s) URL", base)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// DialError is a refused WebSocket handshake: the server's status and the
// problem document's detail.
type DialError struct {
	Status int
	Title  string
	Detail string
}

func (e *DialError) Error() string {
	msg := fmt.Sprintf("terminal refused: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Dial opens a terminal WebSocket with hdr (Authorization, Origin) and the
// cookies of jar (may be nil).
func Dial(ctx context.Context, rawURL string, hdr http.Header, jar http.CookieJar) (*websocket.Conn, error) {
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 30 * time.Second, Jar: jar,
		ReadBufferSize: 32 << 10, WriteBufferSize: 4 << 10}
	conn, resp, err := d.DialContext(ctx, rawURL, hdr)
	if err == nil {
		return conn, nil
	}
	if resp == nil || !errors.Is(err, websocket.ErrBadHandshake) {
		return nil, fmt.Errorf("connect to terminal: %w", err)
	}
	defer resp.Body.Close()
	de := &DialError{Status: resp.StatusCode, Title: http.StatusText(resp.StatusCode)}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) == nil && p.Title != "" {
		de.Title, de.Detail = p.Title, p.Detail
	}
	return nil, de
}
