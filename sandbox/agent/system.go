package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Uptime is the kernel's CLOCK_BOOTTIME: time since the guest kernel started.
func Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// KernelRelease is the guest kernel's release (uname -r).
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (s *Server) stats(ctx context.Context) (agentproto.Stats, error) {
	st := agentproto.Stats{Uptime: Uptime(), CPUs: runtime.NumCPU(), Generation: s.ident.current()}
	load, err := os.ReadFile(filepath.Join(s.cfg.ProcDir, "loadavg"))
	if err != nil {
		return st, fmt.Errorf("read loadavg: %w", err)
	}
	if st.Load1, st.Load5, st.Load15, err = parseLoadavg(string(load)); err != nil {
		return st, err
	}
	mem, err := os.ReadFile(filepath.Join(s.cfg.ProcDir, "meminfo"))
	if err != nil {
		return st, fmt.Errorf("read meminfo: %w", err)
	}
	if st.MemTotal, st.MemAvailable, err = parseMeminfo(string(mem)); err != nil {
		return st, err
	}
	// A guest without cgroup v2 reports no controllers rather than failing:
	// the host decides what that means.
	if ctl, err := os.ReadFile(filepath.Join(s.cfg.CgroupDir, "cgroup.controllers")); err == nil {
		st.CgroupControllers = strings.Fields(string(ctl))
	}
	if st.CgroupControllers == nil {
		st.CgroupControllers = []string{}
	}
	st.Crun = s.crunVersion(ctx)
	if b, err := os.ReadFile(filepath.Join(s.cfg.ProcDir, "self/mountinfo")); err == nil {
		st.Mounts = strings.Count(string(b), "\n")
	}
	if m := s.cfg.Sandboxes; m != nil {
		st.SandboxCgroups, st.SandboxBundles, st.Sandboxes = m.counts()
		st.Prestarted = m.prestartCount()
		st.StubInits = m.stubInits(s.cfg.ProcDir)
		st.MaxSandboxes = m.cfg.MaxSandboxes
	}
	return st, nil
}

func parseLoadavg(s string) (l1, l5, l15 float64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("parse loadavg %q: too few fields", s)
	}
	var vals [3]float64
	for i := range vals {
		if vals[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("parse loadavg: %w", err)
		}
	}
	return vals[0], vals[1], vals[2], nil
}

// parseMeminfo returns MemTotal and MemAvailable in bytes.
func parseMeminfo(s string) (total, avail uint64, err error) {
	var haveTotal, haveAvail bool
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "MemAvailable") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("parse meminfo %s: no value", key)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse meminfo %s: %w", key, err)
		}
		if key == "MemTotal" {
			total, haveTotal = kb*1024, true
		} else {
			avail, haveAvail = kb*1024, true
		}
	}
	if !haveTotal || !haveAvail {
		return 0, 0, fmt.Errorf("parse meminfo: MemTotal or MemAvailable missing")
	}
	return total, avail, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
