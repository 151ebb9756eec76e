package terminal

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/gorilla/websocket"
)

const (
	pingInterval = 20 * time.Second
	pongWait     = 3 * pingInterval // no frame for that long: the client is gone
	writeWait    = 10 * time.Second
	// MaxClientMessage bounds one frame from a client: keystrokes, a paste,
	// a control message.
	MaxClientMessage = 64 << 10
	// maxFrame bounds the output coalesced into one frame.
	maxFrame = 64 << 10
)

// Serve runs client c over an upgraded WebSocket connection until the
// session ends, the hub drops the client, the connection breaks or ctx
// ends; then it closes the connection. Binary frames from the client are
// keystrokes, text frames Control messages; refusals are answered with an
// error message and the connection goes on.
func Serve(ctx context.Context, conn *websocket.Conn, c *Client, log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	defer conn.Close()
	defer c.Leave()
	conn.SetReadLimit(MaxClientMessage)
	alive := func() { _ = conn.SetReadDeadline(time.Now().Add(pongWait)) }
	alive()
	conn.SetPongHandler(func(string) error { alive(); return nil })

	replies := make(chan Control, 16)
	reply := func(ctl Control) {
		select {
		case replies <- ctl:
		default: // a client flooding refused messages loses some answers
		}
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			mt, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			alive()
			switch mt {
			case websocket.BinaryMessage:
				if err := c.Input(data); err != nil {
					if errors.Is(err, ErrEnded) {
						return
					}
					reply(Control{Type: MsgError, Message: err.Error()})
				}
			case websocket.TextMessage:
				var ctl Control
				if err := json.Unmarshal(data, &ctl); err != nil {
					reply(Control{Type: MsgError, Message: "control messages are JSON objects: " + err.Error()})
					continue
				}
				if err := c.Control(ctl); err != nil {
					reply(Control{Type: MsgError, Message: err.Error()})
				}
			}
		}
	}()

	closeWith := func(code int, reason string) {
		msg := websocket.FormatCloseMessage(code, reason)
		_ = conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(writeWait))
		// Give the client a moment to answer the close, then drop it.
		select {
		case <-readDone:
		case <-time.After(time.Second):
		}
	}
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	var (
		next      *Message // a message taken while coalescing, to send next
		outClosed bool     // Out was found closed while coalescing
	)
	for {
		var (
			m  Message
			ok = !outClosed
		)
		if next != nil {
			m, next = *next, nil
		} else if ok {
			select {
			case m, ok = <-c.Out():
			case <-c.Kicked():
				closeWith(c.Closing())
				return
			case r := <-replies:
				m = Message{Control: &r}
			case <-ping.C:
				if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
					return
				}
				continue
			case <-readDone:
				return
			case <-ctx.Done():
				closeWith(CloseGoingAway, "the server is shutting down")
				return
			}
		}
		if !ok {
			closeWith(c.Closing())
			return
		}
		_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
		if m.Control != nil {
			if err := conn.WriteJSON(m.Control); err != nil {
				log.Debug("terminal write", "err", err)
				return
			}
			continue
		}
		// Output that queued up while the last frame went out leaves as
		// one frame: clients count bytes, not frames.
		w, err := conn.NextWriter(websocket.BinaryMessage)
		if err != nil {
			return
		}
		n := len(m.Data)
		_, err = w.Write(m.Data)
		c.Sent(m)
	coalesce:
		for err == nil && n < maxFrame {
			select {
			case more, ok := <-c.Out():
				if !ok {
					outClosed = true
					break coalesce
				}
				if more.Control != nil {
					next = &more
					break coalesce
				}
				n += len(more.Data)
				_, err = w.Write(more.Data)
				c.Sent(more)
			default:
				break coalesce
			}
		}
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			log.Debug("terminal write", "err", err)
			return
		}
	}
}
