package audit

import (
	"strings"
	"sync"
	"time"
)

// Limiter rate-limits events that an outsider can cause at will (denied
// connections, failed sign-ins and tokens): at most burst per key per
// window, so a loop cannot flood the log. The next event admitted for a key
// counts the ones folded in since ("suppressed" in its details).
type Limiter struct {
	window time.Duration
	burst  int
	mu     sync.Mutex
	m      map[string]*limitWindow
}

type limitWindow struct {
	until      time.Time // the window's end
	admitted   int
	suppressed int
}

// NewLimiter returns a limiter admitting burst events per key per window
// (burst below 1 means 1).
func NewLimiter(window time.Duration, burst int) *Limiter {
	return &Limiter{window: window, burst: max(burst, 1), m: map[string]*limitWindow{}}
}

// Admit reports whether an event for key at now is recorded, and how many
// earlier ones it stands for.
func (l *Limiter) Admit(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.m[key]
	if w != nil && now.Before(w.until) {
		if w.admitted >= l.burst {
			w.suppressed++
			return false, 0
		}
		w.admitted++
		return true, 0
	}
	suppressed := 0
	if w != nil {
		suppressed = w.suppressed
	}
	l.m[key] = &limitWindow{until: now.Add(l.window), admitted: 1}
	// Keys whose window passed with nothing folded in are forgotten, so the
	// map stays as small as the recent events.
	if len(l.m) > 1024 {
		for k, x := range l.m {
			if !now.Before(x.until) && x.suppressed == 0 {
				delete(l.m, k)
			}
		}
	}
	return true, suppressed
}

// Forget drops every key starting with prefix (what they were about ended).
func (l *Limiter) Forget(prefix string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.m {
		if strings.HasPrefix(k, prefix) {
			delete(l.m, k)
		}
	}
}
