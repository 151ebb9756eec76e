package hypervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// probeCmdline boots the probe kernel without any root or init: its
// expected end is a panic, printed on the serial console, and panic=0 keeps
// it there until we destroy the domain.
const probeCmdline = "console=ttyS0 quiet panic=0 mitigations=off tsc=reliable no_timer_check 8250.nr_uarts=1"

// probeMarker is printed only by a kernel that came all the way up to
// mounting a root file system.
var probeMarker = []byte("Kernel panic - not syncing")

// DomainType is the domain type to create VMs with, detected once per Host:
// TypeKVM only when libvirt offers kvm AND a real guest kernel (Config.ProbeKernel)
// boots under it; TypeQEMU otherwise. On hosts whose /dev/kvm cannot run
// ordinary guests (kvm_pvm) the boot check fails and the answer is TypeQEMU.
func (h *Host) DomainType(ctx context.Context) (string, error) {
	h.typeMu.Lock()
	defer h.typeMu.Unlock()
	if h.domType != "" {
		return h.domType, nil
	}
	if h.cfg.DomainType != "" {
		h.domType = h.cfg.DomainType
		return h.domType, nil
	}
	t, err := h.detectType(ctx)
	if err != nil {
		return "", fmt.Errorf("detect domain type: %w", err) // not cached: libvirt may come back
	}
	h.domType = t
	return t, nil
}

func (h *Host) detectType(ctx context.Context) (string, error) {
	offered, err := h.kvmOffered(ctx)
	if err != nil {
		return "", err
	}
	if !offered {
		h.log.Info("kvm not offered by libvirt: VMs run under TCG (domain type qemu)")
		return TypeQEMU, nil
	}
	if h.cfg.ProbeKernel == "" {
		h.log.Warn("kvm offered by libvirt but unverified without a probe kernel: VMs run under TCG (domain type qemu)")
		return TypeQEMU, nil
	}
	start := time.Now()
	if err := h.BootCheck(ctx, TypeKVM); err != nil {
		if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return "", err
		}
		h.log.Warn("kvm offered by libvirt but a guest kernel does not boot under it: VMs run under TCG (domain type qemu)",
			"err", err, "took", time.Since(start))
		return TypeQEMU, nil
	}
	h.log.Info("kvm verified by a guest boot", "took", time.Since(start))
	return TypeKVM, nil
}

// kvmOffered asks libvirt's domain capabilities whether kvm is a usable
// virtualization type for x86_64 on this host.
func (h *Host) kvmOffered(ctx context.Context) (bool, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	caps, err := s.conn.GetDomainCapabilities("", "x86_64", "", TypeKVM, 0)
	if err != nil {
		if err := h.fail(err); errors.Is(err, ErrUnavailable) {
			return false, err
		}
		return false, nil // libvirt refuses kvm here (no /dev/kvm, or a driver without it)
	}
	var dc libvirtxml.DomainCaps
	if err := dc.Unmarshal(caps); err != nil {
		return false, fmt.Errorf("parse domain capabilities: %w", err)
	}
	return dc.Domain == TypeKVM, nil
}

// BootCheck boots Config.ProbeKernel with no root file system as a domain of
// type domType and waits, within Config.ProbeTimeout, for the kernel's panic
// about the missing root on the serial console. Success proves the CPU
// virtualization runs a whole kernel boot. The probe domain is destroyed
// before BootCheck returns.
func (h *Host) BootCheck(ctx context.Context, domType string) error {
	if h.cfg.ProbeKernel == "" {
		return fmt.Errorf("boot check %s: %w: no probe kernel configured", domType, ErrInvalid)
	}
	kernel := h.cfg.ProbeKernel
	if h.cfg.ProbeKernelSHA256 != "" { // a local file: the host gets it from its pool
		p, err := h.EnsureVolume(ctx, VolumeName(KindKernel, h.cfg.ProbeKernelSHA256, ""), kernel, h.cfg.ProbeKernelSHA256)
		if err != nil {
			return fmt.Errorf("boot check %s: %w", domType, err)
		}
		kernel = p
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	spec := DomainSpec{
		ID:             "probe-" + hex.EncodeToString(b[:]),
		InstallationID: h.cfg.InstallationID,
		VCPUs:          1,
		MemoryMiB:      256,
		Type:           domType,
		Kernel:         kernel,
		Cmdline:        probeCmdline,
		TBCacheMiB:     64,
	}
	def, err := BuildDomain(spec)
	if err != nil {
		return fmt.Errorf("boot check %s: %w", domType, err)
	}
	xml, err := def.Marshal()
	if err != nil {
		return fmt.Errorf("boot check %s: marshal domain: %w", domType, err)
	}

	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("boot check %s: %w", domType, err)
	}
	defer release()
	// Paused until the console is attached: a pty drops what nobody reads.
	dom, err := s.conn.DomainCreateXML(xml, libvirt.DOMAIN_START_PAUSED)
	if err != nil {
		return fmt.Errorf("boot check %s: create probe: %w", domType, h.fail(err))
	}
	defer func() {
		if err := dom.Destroy(); err != nil && !ignorable(err) {
			h.log.Warn("destroy boot probe", "domain", spec.ID, "err", err)
		}
		dom.Free()
		h.removeLog(spec.ID)
	}()
	console, err := h.openConsole(s, dom)
	if err != nil {
		return fmt.Errorf("boot check %s: open console: %w", domType, err)
	}
	defer console.Close()
	if err := dom.Resume(); err != nil {
		return fmt.Errorf("boot check %s: resume probe: %w", domType, h.fail(err))
	}

	ctx, cancel := context.WithTimeout(ctx, h.cfg.ProbeTimeout)
	defer cancel()
	found := make(chan error, 1)
	go func() { found <- waitFor(console, probeMarker) }()
	select {
	case err := <-found:
		if err != nil {
			return fmt.Errorf("boot check %s: console ended before the kernel finished booting: %w", domType, err)
		}
		return nil
	case <-ctx.Done():
		_ = console.Close() // unblocks waitFor
		return fmt.Errorf("boot check %s: no kernel boot within %s: %w", domType, h.cfg.ProbeTimeout, ctx.Err())
	}
}

// waitFor reads r until marker shows up (nil) or r ends (its error).
func waitFor(r io.Reader, marker []byte) error {
	var seen []byte
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		seen = append(seen, buf[:n]...)
		if bytes.Contains(seen, marker) {
			return nil
		}
		if len(seen) > 1<<20 {
			seen = seen[len(seen)-len(marker):]
		}
		if err != nil {
			return err
		}
	}
}
