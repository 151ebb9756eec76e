package agentproto

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// WriteMessage writes v as one length-prefixed JSON message.
func WriteMessage(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if len(body) > MaxMessageSize {
		return fmt.Errorf("write message of %d bytes: %w", len(body), ErrTooLarge)
	}
	// One write, so a message never interleaves with another writer's bytes.
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}

// ReadMessage reads one length-prefixed JSON message into v. A length over
// MaxMessageSize fails with ErrTooLarge before the body is read or allocated.
func ReadMessage(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("read message length: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxMessageSize {
		return fmt.Errorf("read message of %d bytes: %w", n, ErrTooLarge)
	}
	if n == 0 {
		return fmt.Errorf("read message: %w", ErrEmptyMessage)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("read message body: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode message: %w", err)
	}
	return nil
}

// Channel says what a frame's data is.
type Channel uint8

const (
	// ChannelStdin carries bytes for a command's stdin (host->guest); empty closes it.
	ChannelStdin Channel = 0
	// ChannelStdout carries a command's stdout, or a terminal's output (guest->host).
	ChannelStdout Channel = 1
	// ChannelStderr carries a command's stderr (guest->host).
	ChannelStderr Channel = 2
	// ChannelExit carries ExitStatus as JSON; the last frame of exec and pty.
	ChannelExit Channel = 3
	// ChannelResize carries Winsize as JSON (host->guest, pty only).
	ChannelResize Channel = 4
	// ChannelSignal carries a signal name such as "TERM" (host->guest).
	ChannelSignal Channel = 5
	// ChannelData carries file or connection bytes; empty marks the end.
	ChannelData Channel = 6
	// ChannelError carries Error as JSON and ends the stream.
	ChannelError Channel = 7
)

// Frame is one unit of a streaming op.
type Frame struct {
	Channel Channel
	Data    []byte
}

// WriteFrame writes one frame; data over MaxFrameSize fails with ErrTooLarge.
func WriteFrame(w io.Writer, ch Channel, data []byte) error {
	if len(data) > MaxFrameSize {
		return fmt.Errorf("write frame of %d bytes: %w", len(data), ErrTooLarge)
	}
	buf := make([]byte, 5+len(data))
	buf[0] = byte(ch)
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(data)))
	copy(buf[5:], data)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// ReadFrame reads one frame. A length over MaxFrameSize fails with ErrTooLarge
// before the data is read or allocated.
func ReadFrame(r io.Reader) (Frame, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, fmt.Errorf("read frame header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[1:5])
	if n > MaxFrameSize {
		return Frame{}, fmt.Errorf("read frame of %d bytes: %w", n, ErrTooLarge)
	}
	f := Frame{Channel: Channel(hdr[0]), Data: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return Frame{}, fmt.Errorf("read frame data: %w", err)
	}
	return f, nil
}
