package runs

import (
	"sync"
)

// Log is a run's live output: every step's output in order, kept up to a
// bound, fanned out to subscribers. A subscriber gets what was written so
// far, then each new write; one that does not keep up is dropped (its
// channel closed, Dropped set) rather than slowing the run, and may
// subscribe again to catch up.
type Log struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	cut     int64 // bytes dropped from the front of buf
	subs    map[*Sub]struct{}
	closed  bool
	backlog int
}

// Sub is one subscription to a Log.
type Sub struct {
	// C carries new output; it is closed when the log ends or the
	// subscriber fell behind.
	C       <-chan []byte
	c       chan []byte
	dropped bool
	log     *Log
}

// NewLog returns a Log keeping the last max bytes, whose subscribers may
// fall backlog writes behind before they are dropped.
func NewLog(max, backlog int) *Log {
	if max <= 0 {
		max = 1 << 20
	}
	if backlog <= 0 {
		backlog = 256
	}
	return &Log{max: max, backlog: backlog, subs: map[*Sub]struct{}{}}
}

// Write appends p and sends it to every subscriber. It never blocks on
// them and never fails.
func (l *Log) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - l.max; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
		l.cut += int64(over)
	}
	chunk := append([]byte(nil), p...)
	for s := range l.subs {
		select {
		case s.c <- chunk:
		default:
			s.dropped = true
			close(s.c)
			delete(l.subs, s)
		}
	}
	return len(p), nil
}

// Subscribe returns the output kept so far (and how many earlier bytes were
// cut to keep it bounded) and a subscription to what comes next. On an
// ended log the channel is already closed.
func (l *Log) Subscribe() (past []byte, cut int64, s *Sub) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := make(chan []byte, l.backlog)
	s = &Sub{C: c, c: c, log: l}
	if l.closed {
		close(c)
	} else {
		l.subs[s] = struct{}{}
	}
	return append([]byte(nil), l.buf...), l.cut, s
}

// Dropped reports whether the subscription was ended because it fell
// behind (as opposed to the log ending).
func (s *Sub) Dropped() bool {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	return s.dropped
}

// Close ends the subscription.
func (s *Sub) Close() {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[s]; ok {
		delete(l.subs, s)
		close(s.c)
	}
}

// Close ends the log: subscribers' channels close once they have read what
// was sent; later writes are ignored.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for s := range l.subs {
		close(s.c)
		delete(l.subs, s)
	}
}

// Ended reports whether the log was closed.
func (l *Log) Ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
