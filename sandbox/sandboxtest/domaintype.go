package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/vmpool"
)

// The VM pools detect the domain type (kvm or qemu) with a boot check of
// KVM each time they connect: here, where KVM is offered but no guest
// kernel boots under it, that check costs 8 s or more of both CPUs at
// every start, in every VM test package. The answer is a property of the
// machine and its guest kernel, so the first start that detects it leaves
// it beside the guest image, and later starts (of any test binary) reuse
// it. vmpool's and hypervisor's own tests, which do not start through
// here, keep detecting.

const domainTypeFile = "test-domain-type"

// domainTypeKey is what the detected type holds for: the guest kernel and
// the machine's /dev/kvm (a fixed or removed KVM detects again).
func domainTypeKey(dataDir string) string {
	m, err := image.Load(dataDir)
	if err != nil {
		return ""
	}
	kvm := "no-kvm"
	if fi, err := os.Stat("/dev/kvm"); err == nil {
		kvm = fmt.Sprintf("kvm-%v-%d", fi.Mode(), fi.ModTime().Unix())
	}
	return m.Guest.Version + " " + m.Guest.KernelVersion + " " + kvm
}

// cachedDomainType is the type a start detected before with this guest
// kernel on this machine, "" when there is none (then the pools detect).
func cachedDomainType(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, domainTypeFile))
	if err != nil {
		return ""
	}
	typ, key, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok || key != domainTypeKey(dataDir) || (typ != "kvm" && typ != "qemu") {
		return ""
	}
	return typ
}

// rememberDomainType keeps what vms detected for the next start.
func rememberDomainType(ctx context.Context, vms *vmpool.Service, dataDir string) {
	hs, err := vms.Hosts(ctx)
	if err != nil || len(hs) == 0 || (hs[0].DomainType != "kvm" && hs[0].DomainType != "qemu") {
		return
	}
	key := domainTypeKey(dataDir)
	if key == "" {
		return
	}
	tmp := filepath.Join(dataDir, domainTypeFile+".tmp"+fmt.Sprint(os.Getpid()))
	if err := os.WriteFile(tmp, []byte(hs[0].DomainType+" "+key+"\n"), 0o644); err != nil {
		return
	}
	_ = os.Rename(tmp, filepath.Join(dataDir, domainTypeFile))
}
