package hypervisortest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

var channelSource = regexp.MustCompile(`<source mode=["']bind["'] path=["']([^"']+)["']`)

// ChannelHolder returns the process holding the direct-path lock of the
// qemu:///system domain name's channel (hypervisor channel_direct.go: an
// exclusive flock of the chardev socket's folder, taken for as long as a
// client is connected to the socket), 0 when none does: who talks to that
// VM over its QEMU socket. It reads the live XML with virsh and
// /proc/locks.
func ChannelHolder(tb testing.TB, domain, channel string) int {
	tb.Helper()
	out, err := exec.Command("virsh", "-c", "qemu:///system", "dumpxml", domain).Output()
	if err != nil {
		tb.Fatalf("virsh dumpxml %s: %v", domain, err)
	}
	var dir string
	for _, m := range channelSource.FindAllStringSubmatch(string(out), -1) {
		if filepath.Base(m[1]) == channel {
			dir = filepath.Dir(m[1])
		}
	}
	if dir == "" {
		tb.Fatalf("no unix socket of channel %s in %s's live xml", channel, domain)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		tb.Fatalf("stat %s: %v", dir, err)
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		tb.Fatalf("read /proc/locks: %v", err)
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" {
			continue
		}
		id := strings.Split(f[5], ":")
		if len(id) != 3 {
			continue
		}
		maj, _ := strconv.ParseUint(id[0], 16, 32)
		minor, _ := strconv.ParseUint(id[1], 16, 32)
		if id[2] != strconv.FormatUint(st.Ino, 10) ||
			uint32(maj) != unix.Major(st.Dev) || uint32(minor) != unix.Minor(st.Dev) {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil {
			return pid
		}
	}
	return 0
}
