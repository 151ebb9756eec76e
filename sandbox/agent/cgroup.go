package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// cgroupParent is the cgroup (below the cgroup2 root) that holds every
// sandbox's cgroup.
const cgroupParent = "stockade"

// sandboxControllers are delegated down to each sandbox's cgroup.
var sandboxControllers = []string{"cpu", "memory", "pids", "io"}

// setupCgroups enables the sandbox controllers in the root and makes the
// parent cgroup. The agent itself stays in the root (exempt from the rule
// that a cgroup with controllers for its children holds no processes).
func setupCgroups(root string) (string, error) {
	enable := "+" + strings.Join(sandboxControllers, " +")
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return "", fmt.Errorf("cgroups: enable %s in %s: %w", enable, root, err)
	}
	parent := filepath.Join(root, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cgroups: %w", err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return "", fmt.Errorf("cgroups: enable %s in %s: %w", enable, parent, err)
	}
	return parent, nil
}

// killCgroup kills every process in dir, waits until it is empty and
// removes it. A missing cgroup is not an error.
func killCgroup(ctx context.Context, dir string) error {
	if err := emptyCgroup(ctx, dir); err != nil {
		return err
	}
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || !sleepCtx(ctx, delay) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
	}
}

// emptyCgroup kills every process of the cgroup and waits until none is
// left; the cgroup itself stays, with its final counters.
func emptyCgroup(ctx context.Context, dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("kill cgroup %s: %w", dir, err)
	}
	// The kernel empties the cgroup once the reaper has collected the dead.
	for delay := 200 * time.Microsecond; ; delay = min(delay*2, 20*time.Millisecond) {
		populated, err := cgroupPopulated(dir)
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", dir, err)
		}
		if !populated {
			return nil
		}
		if !sleepCtx(ctx, delay) {
			return fmt.Errorf("kill cgroup %s: still populated: %w", dir, ctx.Err())
		}
	}
}

func cgroupPopulated(dir string) (bool, error) {
	kv, err := readKeyed(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	return kv["populated"] != 0, nil
}

// oomKills is memory.events' oom_kill: processes the OOM killer ended.
func oomKills(dir string) uint64 {
	kv, err := readKeyed(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0
	}
	return kv["oom_kill"]
}

// cgroupStats fills the cgroup part of st from dir.
func cgroupStats(dir string, st *agentproto.SandboxStats) error {
	cpu, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return fmt.Errorf("cgroup stats: %w", err)
	}
	us := func(k string) time.Duration { return time.Duration(cpu[k]) * time.Microsecond }
	st.CPUUsage, st.CPUUser, st.CPUSystem, st.Throttled = us("usage_usec"), us("user_usec"), us("system_usec"), us("throttled_usec")

	var errs []error
	read := func(name string, dst *uint64) {
		v, err := readUint(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
		}
		*dst = v
	}
	read("memory.current", &st.MemoryCurrent)
	read("memory.peak", &st.MemoryPeak)
	read("memory.max", &st.MemoryMax)
	read("pids.current", &st.Pids)
	read("pids.max", &st.PidsMax)
	st.OOMKills = oomKills(dir)
	if kv, err := readKeyed(filepath.Join(dir, "pids.events")); err == nil {
		st.PidsRefused = kv["max"]
	}
	if b, err := os.ReadFile(filepath.Join(dir, "io.stat")); err == nil {
		st.IOReadBytes, st.IOWriteBytes, st.IOReadOps, st.IOWriteOps = parseIOStat(string(b))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroup stats: %w", err)
	}
	return nil
}

// readKeyed reads a flat keyed file ("key value" lines).
func readKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKeyed(string(b)), nil
}

func parseKeyed(s string) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out
}

// readUint reads a one-number file; "max" reads as 0 (no limit).
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// parseIOStat sums io.stat over devices:
// "254:16 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0".
func parseIOStat(s string) (rbytes, wbytes, rios, wios uint64) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for _, kv := range f[min(1, len(f)):] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				rbytes += n
			case "wbytes":
				wbytes += n
			case "rios":
				rios += n
			case "wios":
				wios += n
			}
		}
	}
	return rbytes, wbytes, rios, wios
}
