package volumes

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Guest is what the service needs of a VM's agent (*agentproto.Client).
type Guest interface {
	MountVolume(ctx context.Context, id string, readOnly bool) error
	UnmountVolume(ctx context.Context, id string) error
}

// CheckRequests checks the volumes a sandbox create asks for: bounded in
// number, valid names, valid paths (agentproto.CheckVolumePath), no name
// or path twice, no path inside another. Errors name the field "volumes".
func CheckRequests(reqs []Request) error {
	if len(reqs) > agentproto.MaxVolumeBinds {
		return errdefs.Invalid("volumes", "size", fmt.Sprintf("at most %d volumes per sandbox", agentproto.MaxVolumeBinds))
	}
	for i, r := range reqs {
		if err := CheckName(r.Name); err != nil {
			return errdefs.Invalid("volumes", "name", fmt.Sprintf("volume %d: name %q: 1-63 of a-z, 0-9, _ and -", i+1, clip(r.Name)))
		}
		if err := agentproto.CheckVolumePath(r.Path); err != nil {
			return errdefs.Invalid("volumes", "path", fmt.Sprintf("volume %s: %v", r.Name, err))
		}
		for _, o := range reqs[:i] {
			switch {
			case o.Name == r.Name:
				return errdefs.Invalid("volumes", "repeated", fmt.Sprintf("volume %s is asked for twice", r.Name))
			case o.Path == r.Path || strings.HasPrefix(o.Path, r.Path+"/") || strings.HasPrefix(r.Path, o.Path+"/"):
				return errdefs.Invalid("volumes", "path", fmt.Sprintf("volumes %s at %s and %s at %s: one path holds the other", o.Name, o.Path, r.Name, r.Path))
			}
		}
	}
	return nil
}

// Plan is where a sandbox with volumes may go.
type Plan struct {
	// Pin is the VM the sandbox must be placed on (a volume it asks for is
	// attached read-write there); empty: any.
	Pin string
	// Prefer are VMs that hold some of its volumes already, best first.
	Prefer []string
}

// Plan resolves the volumes a create asks for and says where the sandbox
// may go. An unknown name (another tenant's too) is a FieldError; a
// read-write request for a volume in use, or a read-only one for a volume
// attached read-write to a VM another volume pins elsewhere, is a conflict.
// It writes nothing: Attach decides again, in its transaction.
func (s *Service) Plan(ctx context.Context, tenantID string, reqs []Request) (Plan, error) {
	if err := CheckRequests(reqs); err != nil {
		return Plan{}, err
	}
	var p Plan
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := dropEnded(tx, tenantID); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, r := range reqs {
			v, err := byName(tx, tenantID, r.Name)
			if errors.Is(err, errdefs.ErrNotFound) {
				return errdefs.Invalid("volumes", "unknown", fmt.Sprintf("no volume %q (stockade volume create)", clip(r.Name)))
			}
			if err != nil {
				return err
			}
			pin, prefer, err := placement(tx, v, r.ReadOnly)
			if err != nil {
				return err
			}
			if pin != "" {
				if p.Pin != "" && p.Pin != pin {
					return fmt.Errorf("%w: volumes asked for are attached read-write to different VMs (%s, %s): no sandbox can have both now", errdefs.ErrConflict, p.Pin, pin)
				}
				p.Pin = pin
			}
			for _, vm := range prefer {
				if !seen[vm] {
					seen[vm] = true
					p.Prefer = append(p.Prefer, vm)
				}
			}
		}
		return nil
	})
	if err != nil {
		return Plan{}, fmt.Errorf("volumes: %w", err)
	}
	return p, nil
}

// placement says, inside tx, where a sandbox using v (read-only or not)
// must go (pin) or should go (prefer), or why it cannot have it now.
func placement(tx *gorm.DB, v Volume, readOnly bool) (pin string, prefer []string, err error) {
	var atts []Attachment
	if err := tx.Where("volume_id = ?", v.ID).Order("attached_at").Find(&atts).Error; err != nil {
		return "", nil, err
	}
	var mounts []Mount
	if err := liveMounts(tx).Where("volume_mounts.volume_id = ?", v.ID).Find(&mounts).Error; err != nil {
		return "", nil, err
	}
	if !readOnly {
		if len(mounts) > 0 {
			mode := "read-only"
			if !mounts[0].ReadOnly {
				mode = "read-write"
			}
			return "", nil, fmt.Errorf("%w: volume %s is mounted %s by sandbox %s: a read-write mount needs the volume to itself (ask for it read_only, or destroy that sandbox first)",
				errdefs.ErrConflict, v.Name, mode, mounts[0].SandboxID)
		}
		if len(atts) > 1 {
			return "", nil, fmt.Errorf("%w: volume %s is still attached to %d VMs; try again once they release it", errdefs.ErrConflict, v.Name, len(atts))
		}
	}
	for _, a := range atts {
		if !a.ReadOnly {
			return a.VMID, nil, nil
		}
		prefer = append(prefer, a.VMID)
	}
	if !readOnly && len(atts) == 1 {
		return atts[0].VMID, nil, nil // its read-only disk is swapped there
	}
	return "", prefer, nil
}

// attachStep is a disk to attach (or swap) and mount after the transaction.
type attachStep struct {
	vol      Volume
	readOnly bool
	swap     bool // attached already in the other mode, unused: detach first
	existing bool // attached already in a mode that serves
}

// Attach gives sandbox sandboxID, placed on the tenant's VM vmID, its
// volumes: in one transaction it checks that the VM is the tenant's and
// active, checks each volume's users again and records the mounts and
// attachments; then it hot-attaches the disks the VM lacks and has the
// guest mount them. It returns the binds for the sandbox's spec. On any
// error nothing of it is left (Release undoes the rest).
func (s *Service) Attach(ctx context.Context, actor audit.Actor, tenantID, sandboxID, vmID string, reqs []Request, g Guest) ([]agentproto.VolumeBind, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := CheckRequests(reqs); err != nil {
		return nil, err
	}
	if s.cfg.Hotplug == nil {
		return nil, fmt.Errorf("attach volumes: this server has no disk hotplug: %w", errdefs.Unavailable("hypervisor"))
	}
	unlock := s.lock(tenantID)
	defer func() { unlock() }()
	var steps []attachStep
	binds := make([]agentproto.VolumeBind, 0, len(reqs))
	err := s.tx(ctx, func(tx *gorm.DB) error {
		now := s.clock.Now()
		if _, err := tenants.LockQuota(tx, tenantID, now); err != nil {
			return err
		}
		// Never another tenant's VM: the VM's tenant is read here, in the
		// transaction that records the attachment.
		var vm struct {
			TenantID string `gorm:"column:tenant_id"`
			State    string `gorm:"column:state"`
		}
		if err := tx.Table("vms").Select("tenant_id, state").Where("id = ?", vmID).Take(&vm).Error; err != nil {
			return fmt.Errorf("vm %s: %w", vmID, errdefs.ErrNotFound)
		}
		if vm.TenantID != tenantID {
			return fmt.Errorf("vm %s: %w", vmID, errdefs.ErrNotFound)
		}
		if vm.State != "running" {
			return fmt.Errorf("%w: vm %s is %s", errdefs.ErrConflict, vmID, vm.State)
		}
		if err := dropEnded(tx, tenantID); err != nil {
			return err
		}
		for _, r := range reqs {
			v, err := byName(tx, tenantID, r.Name)
			if errors.Is(err, errdefs.ErrNotFound) {
				return errdefs.Invalid("volumes", "unknown", fmt.Sprintf("no volume %q", clip(r.Name)))
			}
			if err != nil {
				return err
			}
			pin, _, err := placement(tx, v, r.ReadOnly)
			if err != nil {
				return err
			}
			if pin != "" && pin != vmID {
				return fmt.Errorf("%w: volume %s is attached to vm %s, this sandbox is on %s", errdefs.ErrConflict, v.Name, pin, vmID)
			}
			step := attachStep{vol: v, readOnly: r.ReadOnly}
			var cur Attachment
			err = tx.Take(&cur, "volume_id = ? AND vm_id = ?", v.ID, vmID).Error
			switch {
			case err == nil && (!cur.ReadOnly || r.ReadOnly):
				step.existing = true // read-write serves both; read-only serves read-only
				step.readOnly = cur.ReadOnly
			case err == nil:
				// Read-only there, wanted read-write: placement found no
				// user, so the disk is swapped.
				step.swap = true
				if err := tx.Model(&Attachment{}).Where("volume_id = ? AND vm_id = ?", v.ID, vmID).Update("read_only", false).Error; err != nil {
					return err
				}
			case errors.Is(err, gorm.ErrRecordNotFound):
				if err := tx.Create(&Attachment{VolumeID: v.ID, VMID: vmID, TenantID: tenantID, ReadOnly: r.ReadOnly, AttachedAt: now}).Error; err != nil {
					return err
				}
			default:
				return err
			}
			if err := tx.Create(&Mount{VolumeID: v.ID, SandboxID: sandboxID, TenantID: tenantID, VMID: vmID, Path: r.Path, ReadOnly: r.ReadOnly, CreatedAt: now}).Error; err != nil {
				return err
			}
			if err := tx.Model(&Volume{}).Where("id = ?", v.ID).Update("last_used_at", now).Error; err != nil {
				return err
			}
			if !step.existing {
				if err := s.audit(tx, actor, tenantID, audit.TypeVolumeAttached, v, map[string]any{"vm": vmID, "read_only": r.ReadOnly, "sandbox": sandboxID}); err != nil {
					return err
				}
			}
			steps = append(steps, step)
			binds = append(binds, agentproto.VolumeBind{ID: v.ID, Path: r.Path, ReadOnly: r.ReadOnly})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("attach volumes: %w", err)
	}
	for _, st := range steps {
		if err := s.plug(ctx, tenantID, vmID, st, g); err != nil {
			unlock()
			unlock = func() {}
			s.Release(context.WithoutCancel(ctx), tenantID, sandboxID, func(string) (Guest, error) { return g, nil })
			return nil, fmt.Errorf("attach volume %s: %w", st.vol.Name, err)
		}
	}
	return binds, nil
}

// plug makes step's disk attached and mounted in the VM.
func (s *Service) plug(ctx context.Context, tenantID, vmID string, st attachStep, g Guest) error {
	d := Disk{Path: s.path(tenantID, st.vol.ID), Serial: st.vol.ID, ReadOnly: st.readOnly}
	if st.swap {
		if err := g.UnmountVolume(ctx, st.vol.ID); err != nil {
			return err
		}
		if err := s.cfg.Hotplug.DetachDisk(ctx, tenantID, vmID, Disk{Path: d.Path, Serial: d.Serial, ReadOnly: true}); err != nil {
			return err
		}
	}
	if !st.existing {
		if err := s.cfg.Hotplug.AttachDisk(ctx, tenantID, vmID, d); err != nil {
			return err
		}
	}
	return g.MountVolume(ctx, st.vol.ID, st.readOnly)
}

// Release drops sandbox sandboxID's mounts and detaches, from the VMs they
// were on, every volume no live sandbox there uses any more (unmounted in
// the guest first; a guest out of reach: the VM is gone or going, only the
// rows go once it has ended). Errors are logged: a disk that could not be
// detached stays recorded and is tried again at the next release there.
func (s *Service) Release(ctx context.Context, tenantID, sandboxID string, guest func(vmID string) (Guest, error)) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&Mount{}).Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Count(&n).Error; err != nil || n == 0 {
		return // none: nothing to do for most sandboxes
	}
	defer s.lock(tenantID)()
	type idleDisk struct {
		Attachment
		vol Volume
	}
	var idle []idleDisk
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var vms []string
		if err := tx.Model(&Mount{}).Distinct("vm_id").Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Pluck("vm_id", &vms).Error; err != nil {
			return err
		}
		if err := tx.Where("tenant_id = ? AND sandbox_id = ?", tenantID, sandboxID).Delete(&Mount{}).Error; err != nil {
			return err
		}
		if err := dropEnded(tx, tenantID); err != nil {
			return err
		}
		for _, vmID := range vms {
			var atts []Attachment
			if err := tx.Where("tenant_id = ? AND vm_id = ? AND volume_id NOT IN (?)", tenantID, vmID,
				tx.Model(&Mount{}).Select("volume_id").Where("tenant_id = ? AND vm_id = ?", tenantID, vmID)).Find(&atts).Error; err != nil {
				return err
			}
			for _, a := range atts {
				var v Volume
				if err := tx.Take(&v, "id = ?", a.VolumeID).Error; err != nil {
					return err
				}
				idle = append(idle, idleDisk{Attachment: a, vol: v})
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("release volumes", "sandbox", sandboxID, "err", err)
		return
	}
	for _, d := range idle {
		if err := s.unplug(ctx, tenantID, d.Attachment, d.vol, guest); err != nil {
			s.log.Warn("detach volume", "volume", d.vol.ID, "vm", d.VMID, "err", err)
			continue
		}
		err := s.tx(context.WithoutCancel(ctx), func(tx *gorm.DB) error {
			if err := tx.Where("volume_id = ? AND vm_id = ?", d.vol.ID, d.VMID).Delete(&Attachment{}).Error; err != nil {
				return err
			}
			return s.audit(tx, audit.Actor{Kind: audit.ActorSystem, ID: "volumes", Name: "volume service"}, tenantID, audit.TypeVolumeDetached, d.vol,
				map[string]any{"vm": d.VMID, "read_only": d.ReadOnly})
		})
		if err != nil {
			s.log.Warn("record volume detached", "volume", d.vol.ID, "err", err)
		}
	}
}

// unplug unmounts volume v in the guest of a's VM and detaches its disk.
func (s *Service) unplug(ctx context.Context, tenantID string, a Attachment, v Volume, guest func(vmID string) (Guest, error)) error {
	g, err := guest(a.VMID)
	if err != nil {
		return fmt.Errorf("the vm's agent: %w", err)
	}
	if err := g.UnmountVolume(ctx, v.ID); err != nil && !errors.Is(err, agentproto.ErrNotFound) {
		return err
	}
	if s.cfg.Hotplug == nil {
		return nil
	}
	err = s.cfg.Hotplug.DetachDisk(ctx, tenantID, a.VMID, Disk{Path: s.path(tenantID, v.ID), Serial: v.ID, ReadOnly: a.ReadOnly})
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// Order keeps of vms (each named by id) the pinned one only, if any, and
// puts the preferred ones first, keeping the order otherwise.
func Order[T any](p Plan, vms []T, id func(T) string) []T {
	if p.Pin != "" {
		for _, vm := range vms {
			if id(vm) == p.Pin {
				return []T{vm}
			}
		}
		return nil
	}
	rank := map[string]int{}
	for i, vm := range p.Prefer {
		rank[vm] = i + 1
	}
	out := append([]T(nil), vms...)
	sort.SliceStable(out, func(i, j int) bool {
		ri, rj := rank[id(out[i])], rank[id(out[j])]
		return ri != 0 && (rj == 0 || ri < rj)
	})
	return out
}
