package agent

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agent/sandboxinit"
)

// stubInits counts the sandboxes whose PID 1 is the stub init right now
// (hypervisor/image/stubinit): their init's executable is the stub's file.
func (m *Manager) stubInits(procDir string) int {
	var stub unix.Stat_t
	if m.cfg.StubPath == "" || unix.Stat(m.cfg.StubPath, &stub) != nil {
		return 0
	}
	m.mu.Lock()
	sbs := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		sbs = append(sbs, sb)
	}
	m.mu.Unlock()
	n := 0
	for _, sb := range sbs {
		sb.mu.Lock()
		pid := sb.initPID
		sb.mu.Unlock()
		var st unix.Stat_t
		if pid > 0 && unix.Stat(filepath.Join(procDir, fmt.Sprint(pid), "exe"), &st) == nil &&
			st.Dev == stub.Dev && st.Ino == stub.Ino {
			n++
		}
	}
	return n
}

// setInitIdle tells the sandbox's init its idle time before the stub init
// takes PID 1 (a claimed pre-started sandbox: its member spec said never).
func (m *Manager) setInitIdle(sb *sandbox) error {
	if m.cfg.StubPath == "" {
		return nil
	}
	ms := int(m.initIdle(sb.spec).Milliseconds())
	if err := sendInit(sb.watch, initRequest{Op: sandboxinit.OpIdle, IdleMillis: ms}); err != nil {
		return fmt.Errorf("set init idle time: %w", err)
	}
	return nil
}
