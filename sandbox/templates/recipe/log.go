package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// MaxLogBytes is what a build log keeps; the rest is counted, not written.
const MaxLogBytes = 1 << 20

// boundedLog is a build's log file: at most MaxLogBytes, then one line
// saying how much was dropped. Safe for concurrent writers (a setup
// command's stdout and stderr).
type boundedLog struct {
	mu      sync.Mutex
	f       *os.File
	n       int64
	dropped int64
}

func openLog(path string) (*boundedLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open build log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open build log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open build log: %w", err)
	}
	return &boundedLog{f: f, n: st.Size()}, nil
}

func (l *boundedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := MaxLogBytes - l.n
	if room <= 0 {
		l.dropped += int64(len(p))
		return len(p), nil
	}
	w := p
	if int64(len(w)) > room {
		w = w[:room]
		l.dropped += int64(len(p) - len(w))
	}
	n, err := l.f.Write(w)
	l.n += int64(n)
	if err != nil {
		return n, err
	}
	return len(p), nil
}

// Size is the bytes written.
func (l *boundedLog) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *boundedLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		n, _ := fmt.Fprintf(l.f, "\n[log truncated: %d more bytes not kept]\n", l.dropped)
		l.n += int64(n)
	}
	return l.f.Close()
}

func (b *Builder) logPath(tenant, id string) string {
	return filepath.Join(b.o.DataDir, "template-builds", tenant, id+".log")
}

// Log is the log of the tenant's build id of template name, from offset.
func (b *Builder) Log(ctx context.Context, tenant, name, id string, offset int64) (Build, io.ReadCloser, error) {
	build, err := b.o.Store.Get(ctx, tenant, name, id)
	if err != nil {
		return Build{}, nil, err
	}
	f, err := os.Open(b.logPath(tenant, build.ID))
	if errors.Is(err, os.ErrNotExist) {
		return build, io.NopCloser(&emptyReader{}), nil
	}
	if err != nil {
		return Build{}, nil, fmt.Errorf("open build log %s: %w", id, err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return Build{}, nil, fmt.Errorf("read build log %s: %w", id, err)
		}
	}
	return build, f, nil
}

type emptyReader struct{}

func (*emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

// Follow calls emit with the build's log as it grows (and with no chunk
// when only its step changed), until the build has ended and its log is
// read out, or ctx ends, or emit fails. It returns the build as it was
// last read. Utf-8 sequences cut by a chunk boundary are held back to the
// next chunk.
func (b *Builder) Follow(ctx context.Context, tenant, name, id string, emit func(chunk []byte, b Build) error) (Build, error) {
	var off int64
	step := -1
	var carry []byte
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		build, rc, err := b.Log(ctx, tenant, name, id, off)
		if err != nil {
			return Build{}, err
		}
		chunk, err := io.ReadAll(io.LimitReader(rc, 256<<10))
		rc.Close()
		if err != nil {
			return build, fmt.Errorf("follow build log %s: %w", id, err)
		}
		off += int64(len(chunk))
		text := append(carry, chunk...)
		carry = nil
		if cut := incompleteUTF8(text); cut > 0 && !(build.Ended() && len(chunk) == 0) {
			text, carry = text[:len(text)-cut], append([]byte(nil), text[len(text)-cut:]...)
		}
		if len(text) > 0 || build.Step != step {
			step = build.Step
			if err := emit(text, build); err != nil {
				return build, err
			}
		}
		if build.Ended() && len(chunk) == 0 {
			return build, nil
		}
		if len(chunk) > 0 {
			continue // more may be there already
		}
		select {
		case <-ctx.Done():
			return build, ctx.Err()
		case <-tick.C:
		}
	}
}

// incompleteUTF8 is how many bytes at the end of b start a UTF-8 sequence
// that is not complete yet.
func incompleteUTF8(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c&0xC0 == 0x80 {
			continue // a continuation byte: look further back
		}
		if c&0x80 == 0 {
			return 0
		}
		need := 2
		if c&0xF0 == 0xE0 {
			need = 3
		} else if c&0xF8 == 0xF0 {
			need = 4
		}
		if need > i {
			return i
		}
		return 0
	}
	return 0
}
