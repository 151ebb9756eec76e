package hypervisor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// Disk hot-plug (hotplug.go). Tenant templates and volumes reach a running
// VM without a reboot: AttachDisk adds a virtio disk to the live domain,
// DetachDisk takes it away again, LiveDisks lists what the live domain
// holds. Only the live domain changes (our domains are transient), so a
// disk attached here is gone when the VM ends. The guest must let go of a
// disk (unmount it) before DetachDisk.

// HotDisk is a disk to attach to a running domain.
type HotDisk struct {
	Path     string
	Target   string // "vdb", "vdc", ...: a slot free in the domain
	ReadOnly bool
	Format   string // "raw" when empty
	// Serial is the disk's serial number as the guest reads it
	// (/sys/block/vdX/serial), at most 20 of [A-Za-z0-9_-]: how the guest
	// tells hot-plugged disks apart.
	Serial string
	// Discard passes the guest's discards down to the file (Disk.Discard).
	Discard bool
}

var (
	hotTargetRE = regexp.MustCompile(`^vd[b-z]$`)
	serialRE    = regexp.MustCompile(`^[A-Za-z0-9_-]{0,20}$`)
)

func (d HotDisk) xml() (string, error) {
	if !hotTargetRE.MatchString(d.Target) {
		return "", fmt.Errorf("disk target %q: must be vdb to vdz", d.Target)
	}
	if !serialRE.MatchString(d.Serial) {
		return "", fmt.Errorf("disk serial %q: at most 20 of letters, digits, '_' and '-'", d.Serial)
	}
	if d.Path == "" || d.Path[0] != '/' {
		return "", fmt.Errorf("disk path %q: must be absolute", d.Path)
	}
	format := d.Format
	if format == "" {
		format = "raw"
	}
	disk := libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: d.Path}},
		Target: &libvirtxml.DomainDiskTarget{Dev: d.Target, Bus: "virtio"},
		Serial: d.Serial,
	}
	if d.ReadOnly {
		disk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	if d.Discard {
		disk.Driver.Discard = "unmap"
	}
	return disk.Marshal()
}

// AttachDisk attaches d to our running domain id. A target in use is
// ErrConflict (libvirt's own refusal).
func (h *Host) AttachDisk(ctx context.Context, id string, d HotDisk) error {
	x, err := d.xml()
	if err != nil {
		return fmt.Errorf("attach disk to vm %s: %w", id, err)
	}
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("attach disk to vm %s: %w", id, err)
	}
	defer release()
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return fmt.Errorf("attach disk to vm %s: %w", id, err)
	}
	defer dom.Free()
	if err := dom.AttachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE); err != nil {
		return fmt.Errorf("attach disk %s to vm %s: %w", d.Target, id, h.fail(err))
	}
	return nil
}

// DetachDisk asks our running domain id to let go of the disk at target
// and returns once libvirt says it is gone from the live domain (the
// guest acknowledges an unplug; ctx bounds the wait). No disk there is
// ErrNotFound.
func (h *Host) DetachDisk(ctx context.Context, id, target string) error {
	disks, err := h.LiveDisks(ctx, id)
	if err != nil {
		return fmt.Errorf("detach disk from vm %s: %w", id, err)
	}
	i := slices.IndexFunc(disks, func(d HotDisk) bool { return d.Target == target })
	if i < 0 {
		return fmt.Errorf("detach disk %s from vm %s: %w: no such disk", target, id, ErrNotFound)
	}
	x, err := disks[i].xml()
	if err != nil {
		return fmt.Errorf("detach disk from vm %s: %w", id, err)
	}
	s, release, err := h.acquire(ctx)
	if err != nil {
		return fmt.Errorf("detach disk from vm %s: %w", id, err)
	}
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		release()
		return fmt.Errorf("detach disk from vm %s: %w", id, err)
	}
	err = dom.DetachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE)
	dom.Free()
	release()
	if err != nil {
		return fmt.Errorf("detach disk %s from vm %s: %w", target, id, h.fail(err))
	}
	// The unplug completes when the guest acknowledges it: wait for the
	// live domain to drop the disk.
	for {
		disks, err := h.LiveDisks(ctx, id)
		if err != nil {
			return fmt.Errorf("detach disk from vm %s: %w", id, err)
		}
		if !slices.ContainsFunc(disks, func(d HotDisk) bool { return d.Target == target }) {
			return nil
		}
		if err := sleepCtx(ctx, detachPoll); err != nil {
			return fmt.Errorf("detach disk %s from vm %s: the guest did not let go: %w", target, id, err)
		}
	}
}

// LiveDisks lists the disks of our running domain id as it is now.
func (h *Host) LiveDisks(ctx context.Context, id string) ([]HotDisk, error) {
	s, release, err := h.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("disks of vm %s: %w", id, err)
	}
	defer release()
	dom, _, err := h.lookupOurs(s, id)
	if err != nil {
		return nil, fmt.Errorf("disks of vm %s: %w", id, err)
	}
	defer dom.Free()
	x, err := dom.GetXMLDesc(0)
	if err != nil {
		return nil, fmt.Errorf("disks of vm %s: %w", id, h.fail(err))
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("disks of vm %s: %w", id, err)
	}
	var out []HotDisk
	if d.Devices == nil {
		return nil, nil
	}
	for _, disk := range d.Devices.Disks {
		if disk.Target == nil || disk.Source == nil || disk.Source.File == nil {
			continue
		}
		hd := HotDisk{Path: disk.Source.File.File, Target: disk.Target.Dev, ReadOnly: disk.ReadOnly != nil, Serial: disk.Serial}
		if disk.Driver != nil {
			hd.Format = disk.Driver.Type
		}
		out = append(out, hd)
	}
	return out, nil
}

// detachPoll is how often DetachDisk looks whether the guest let go.
const detachPoll = 50 * time.Millisecond

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
