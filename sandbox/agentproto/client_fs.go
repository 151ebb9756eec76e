package agentproto

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// fsUnary runs one of the unary file system ops and checks its entry.
func (c *Client) fsUnary(ctx context.Context, op Op, req FsRequest) (FsResult, error) {
	if err := c.supports(op); err != nil {
		return FsResult{}, err
	}
	resp, err := c.call(ctx, Request{V: Version, Op: op, Fs: &req})
	if err != nil {
		return FsResult{}, fmt.Errorf("%s %s in %s: %w", op, req.Path, req.Sandbox, err)
	}
	if resp.Fs == nil || (resp.Fs.Entry == nil && op != OpFsRemove) {
		return FsResult{}, fmt.Errorf("%s %s: no result: %w", op, req.Path, ErrProtocol)
	}
	if e := resp.Fs.Entry; e != nil {
		if err := CheckFsEntry(*e); err != nil {
			return FsResult{}, fmt.Errorf("%s %s: %w", op, req.Path, err)
		}
	}
	return *resp.Fs, nil
}

// Stat reports the entry at req.Path (a symlink as itself).
func (c *Client) Stat(ctx context.Context, req FsRequest) (FsEntry, error) {
	res, err := c.fsUnary(ctx, OpFsStat, req)
	return deref(res.Entry), err
}

// MakeDir makes the folder req.Path with its missing parents (req.Mode, 0
// meaning 0755); created is false when it was there already.
func (c *Client) MakeDir(ctx context.Context, req FsRequest) (e FsEntry, created bool, err error) {
	res, err := c.fsUnary(ctx, OpFsMkdir, req)
	return deref(res.Entry), res.Created, err
}

// Remove removes req.Path (a folder with entries only with req.Recursive).
func (c *Client) Remove(ctx context.Context, req FsRequest) error {
	_, err := c.fsUnary(ctx, OpFsRemove, req)
	return err
}

// Move renames req.Path to req.Dest and reports it there.
func (c *Client) Move(ctx context.Context, req FsRequest) (FsEntry, error) {
	res, err := c.fsUnary(ctx, OpFsMove, req)
	return deref(res.Entry), err
}

// Chmod sets req.Path's permission bits to req.Mode.
func (c *Client) Chmod(ctx context.Context, req FsRequest) (FsEntry, error) {
	res, err := c.fsUnary(ctx, OpFsChmod, req)
	return deref(res.Entry), err
}

func deref(e *FsEntry) FsEntry {
	if e == nil {
		return FsEntry{}
	}
	return *e
}

// readFsFrames reads the data frames of a streaming fs op until the empty
// one, handing each to data; an error frame is the op's *RemoteError.
func readFsFrames(ctx context.Context, st net.Conn, op Op, data func([]byte) error) error {
	for {
		f, err := ReadFrame(st)
		if err != nil {
			return ctxErr(ctx, err)
		}
		switch f.Channel {
		case ChannelData:
			if len(f.Data) == 0 {
				return nil
			}
			if err := data(f.Data); err != nil {
				return err
			}
		case ChannelError:
			var we Error
			if err := json.Unmarshal(f.Data, &we); err != nil {
				return fmt.Errorf("error frame: %w", ErrProtocol)
			}
			return &RemoteError{Op: op, Err: we}
		default:
			return fmt.Errorf("frame on channel %d: %w", f.Channel, ErrProtocol)
		}
	}
}

// ListDir lists the entries below req.Path, req.Depth levels deep (1: its
// own). truncated says the agent left entries out (MaxListEntries).
func (c *Client) ListDir(ctx context.Context, req FsRequest) (entries []FsEntry, truncated bool, err error) {
	st, _, err := c.open(ctx, Request{V: Version, Op: OpFsList, Fs: &req})
	if err != nil {
		return nil, false, fmt.Errorf("list %s in %s: %w", req.Path, req.Sandbox, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err = readFsFrames(ctx, st, OpFsList, func(b []byte) error {
		var ch FsListChunk
		if err := json.Unmarshal(b, &ch); err != nil {
			return fmt.Errorf("list chunk: %w", ErrProtocol)
		}
		if len(entries)+len(ch.Entries) > MaxListEntries {
			return fmt.Errorf("over %d entries: %w", MaxListEntries, ErrProtocol)
		}
		for _, e := range ch.Entries {
			if err := CheckFsEntry(e); err != nil {
				return err
			}
		}
		entries = append(entries, ch.Entries...)
		truncated = truncated || ch.Truncated
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", req.Path, err)
	}
	return entries, truncated, nil
}

// Archive writes req.Path as a tar stream to w: a folder's entries
// relative to it, anything else as one entry by its name. More than
// req.MaxBytes (or the agent's file bound) fails with ErrFileTooLarge,
// after some of the stream was written.
func (c *Client) Archive(ctx context.Context, req FsRequest, w io.Writer) (int64, error) {
	st, _, err := c.open(ctx, Request{V: Version, Op: OpFsArchive, Fs: &req})
	if err != nil {
		return 0, fmt.Errorf("archive %s in %s: %w", req.Path, req.Sandbox, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var n int64
	err = readFsFrames(ctx, st, OpFsArchive, func(b []byte) error {
		n += int64(len(b))
		if req.MaxBytes > 0 && n > req.MaxBytes {
			return fmt.Errorf("agent sent over %d bytes: %w", req.MaxBytes, ErrProtocol)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("archive %s: %w", req.Path, err)
	}
	return n, nil
}

// Watch is a running fs.watch. Close ends it.
type Watch struct {
	st     net.Conn
	rate   *WatchRate
	stop   func() bool
	once   sync.Once
	closed atomic.Bool
}

// Watch starts watching the folder req.Path (req.Recursive: the folders
// below it too). It returns once the agent watches.
func (c *Client) Watch(ctx context.Context, req FsRequest) (*Watch, error) {
	st, _, err := c.open(ctx, Request{V: Version, Op: OpFsWatch, Fs: &req})
	if err != nil {
		return nil, fmt.Errorf("watch %s in %s: %w", req.Path, req.Sandbox, err)
	}
	w := &Watch{st: st, rate: NewWatchRate(time.Now())}
	w.stop = context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	return w, nil
}

// Next returns the next batch of events (each checked, and bounded to
// MaxWatchRate a second whatever the agent sends: the rest are counted in
// an overflow event; a batch may then be empty). It fails when the
// watch ends: the agent's error (the folder went, the sandbox stopped), or
// the session's or ctx's end; io.EOF once Close was called.
func (w *Watch) Next() ([]FsEvent, error) {
	f, err := ReadFrame(w.st)
	if err != nil {
		if w.closed.Load() {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("watch: %w", err)
	}
	switch f.Channel {
	case ChannelData:
		if len(f.Data) == 0 {
			return nil, io.EOF
		}
		var b FsEventBatch
		if err := json.Unmarshal(f.Data, &b); err != nil || len(b.Events) > MaxWatchBatch {
			return nil, fmt.Errorf("watch batch: %w", ErrProtocol)
		}
		for _, ev := range b.Events {
			if err := CheckFsEvent(ev); err != nil {
				return nil, err
			}
		}
		return w.rate.Admit(time.Now(), b.Events), nil
	case ChannelError:
		var we Error
		if err := json.Unmarshal(f.Data, &we); err != nil {
			return nil, fmt.Errorf("watch error frame: %w", ErrProtocol)
		}
		return nil, &RemoteError{Op: OpFsWatch, Err: we}
	}
	return nil, fmt.Errorf("watch frame on channel %d: %w", f.Channel, ErrProtocol)
}

// Close ends the watch (the agent stops watching).
func (w *Watch) Close() error {
	w.once.Do(func() {
		w.closed.Store(true)
		w.stop()
		w.st.Close()
	})
	return nil
}
