package volumes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtime"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// Bounds of a volume.
const (
	MinSizeGiB = 1
	MaxSizeGiB = 16 << 10 // 16 TiB, whatever the quota says
)

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Disk is a volume's disk as the hypervisor attaches it.
type Disk struct {
	Path     string
	Serial   string // the volume id: the guest finds the disk by it
	ReadOnly bool
}

// Hotplug attaches disks to running VMs and detaches them; the composition
// root adapts the VM pools' hotplug to it.
type Hotplug interface {
	AttachDisk(ctx context.Context, tenantID, vmID string, d Disk) error
	DetachDisk(ctx context.Context, tenantID, vmID string, d Disk) error
}

// Config configures a Service.
type Config struct {
	// DataDir holds the images under volumes/<installation>/<tenant>/.
	DataDir        string
	InstallationID string
	Logger         *slog.Logger
	// Clock stamps the rows; nil is time.Now.
	Clock func() time.Time
	// Hotplug attaches disks; nil: volumes can be kept but not attached
	// (ErrUnavailable).
	Hotplug Hotplug
}

// Service keeps the tenants' volumes.
type Service struct {
	db    *gorm.DB
	cfg   Config
	clock dbtime.Clock
	log   *slog.Logger

	mu       sync.Mutex
	tenantMu map[string]*sync.Mutex // attach, release, resize and delete of a tenant's volumes
}

// New returns a Service on db (opened and migrated).
func New(db *gorm.DB, cfg Config) (*Service, error) {
	if db == nil || cfg.DataDir == "" || cfg.InstallationID == "" {
		return nil, errors.New("volume service: a database, a data dir and the installation id are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{db: db, cfg: cfg, clock: cfg.Clock, log: cfg.Logger.With("component", "volumes"), tenantMu: map[string]*sync.Mutex{}}, nil
}

func (s *Service) lock(tenantID string) func() {
	s.mu.Lock()
	l := s.tenantMu[tenantID]
	if l == nil {
		l = &sync.Mutex{}
		s.tenantMu[tenantID] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (s *Service) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}

// path is where volume id of the tenant keeps its image.
func (s *Service) path(tenantID, id string) string {
	return filepath.Join(s.cfg.DataDir, "volumes", s.cfg.InstallationID, tenantID, id+".img")
}

func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "vol-" + hex.EncodeToString(b[:]), nil
}

// CheckName reports why name cannot name a volume.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return errdefs.Invalid("name", "syntax", "1-63 of a-z, 0-9, _ and -, starting with a letter or digit")
	}
	return nil
}

func checkSize(field string, gib int) error {
	if gib < MinSizeGiB || gib > MaxSizeGiB {
		return errdefs.Invalid(field, "range", fmt.Sprintf("must be between %d and %d GiB", MinSizeGiB, MaxSizeGiB))
	}
	return nil
}

// checkQuota checks, inside tx and with the tenant locked, that the
// tenant's volumes plus more GiB fit its volume quota.
func (s *Service) checkQuota(tx *gorm.DB, tenantID string, more int) error {
	q, err := tenants.LockQuota(tx, tenantID, s.clock.Now())
	if err != nil {
		return err
	}
	var held int
	if err := tx.Model(&Volume{}).Select("COALESCE(SUM(size_gib), 0)").Where("tenant_id = ?", tenantID).Scan(&held).Error; err != nil {
		return err
	}
	if held+more > q.MaxVolumeGiB {
		return &errdefs.QuotaError{Quota: tenants.QuotaMaxVolumeGiB, Limit: q.MaxVolumeGiB, Want: held + more,
			Detail: fmt.Sprintf("the tenant's volumes hold %d GiB, this asks for %d more, the quota is %d GiB", held, more, q.MaxVolumeGiB)}
	}
	return nil
}

func actorName(a audit.Actor) string {
	if a.Name != "" {
		return a.Name
	}
	return a.ID
}

func (s *Service) audit(tx *gorm.DB, actor audit.Actor, tenantID, typ string, v Volume, details map[string]any) error {
	if details == nil {
		details = map[string]any{}
	}
	details["name"] = v.Name
	e := actor.Event(tenantID, typ, "volume", v.ID, details)
	e.Time = s.clock.Now()
	return audit.Write(tx, e)
}

// Create makes the tenant's volume name of sizeGiB: the image is made
// first, then recorded after the quota check in one transaction; on any
// failure nothing is left. Audited volume.created.
func (s *Service) Create(ctx context.Context, actor audit.Actor, tenantID, name string, sizeGiB int) (Volume, error) {
	if err := errors.Join(CheckName(name), checkSize("size_gib", sizeGiB)); err != nil {
		return Volume{}, err
	}
	id, err := newID()
	if err != nil {
		return Volume{}, fmt.Errorf("create volume: %w", err)
	}
	// Refuse early what the transaction would refuse, before the image.
	if err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.nameFree(tx, tenantID, name); err != nil {
			return err
		}
		return s.checkQuota(tx, tenantID, sizeGiB)
	}); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	path := s.path(tenantID, id)
	if err := makeImage(ctx, path, sizeGiB); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	now := s.clock.Now()
	v := Volume{ID: id, TenantID: tenantID, Name: name, SizeGiB: sizeGiB, State: StateReady,
		CreatedBy: actor.ID, CreatedByName: actorName(actor), CreatedAt: now, UpdatedAt: now}
	err = s.tx(context.WithoutCancel(ctx), func(tx *gorm.DB) error {
		if err := s.checkQuota(tx, tenantID, sizeGiB); err != nil {
			return err
		}
		if err := s.nameFree(tx, tenantID, name); err != nil {
			return err
		}
		if err := tx.Create(&v).Error; err != nil {
			return err
		}
		if err := usage.OpenVolumePeriod(tx, tenantID, v.ID, v.Name, v.SizeGiB, now); err != nil {
			return err
		}
		return s.audit(tx, actor, tenantID, audit.TypeVolumeCreated, v, map[string]any{"size_gib": sizeGiB})
	})
	if err != nil {
		os.Remove(path)
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	s.log.Info("volume created", "volume", id, "tenant", tenantID, "name", name, "size_gib", sizeGiB)
	return v, nil
}

func (s *Service) nameFree(tx *gorm.DB, tenantID, name string) error {
	var n int64
	if err := tx.Model(&Volume{}).Where("tenant_id = ? AND name = ?", tenantID, name).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: the tenant has a volume called %s", errdefs.ErrConflict, name)
	}
	return nil
}

// byName reads the tenant's volume name inside tx; another tenant's is
// not found.
func byName(tx *gorm.DB, tenantID, name string) (Volume, error) {
	var v Volume
	err := tx.Take(&v, "tenant_id = ? AND name = ?", tenantID, name).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Volume{}, fmt.Errorf("volume %s: %w", clip(name), errdefs.ErrNotFound)
	}
	return v, err
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// List returns the tenant's volumes by name, with their attachments and
// live mounts.
func (s *Service) List(ctx context.Context, tenantID string) ([]Status, error) {
	var vols []Volume
	db := s.db.WithContext(ctx)
	if err := db.Where("tenant_id = ?", tenantID).Order("name").Find(&vols).Error; err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var atts []Attachment
	if err := db.Where("tenant_id = ?", tenantID).Order("attached_at").Find(&atts).Error; err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var mounts []Mount
	if err := liveMounts(db).Where("volume_mounts.tenant_id = ?", tenantID).Order("volume_mounts.created_at").Find(&mounts).Error; err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := make([]Status, len(vols))
	for i, v := range vols {
		out[i].Volume = v
		for _, a := range atts {
			if a.VolumeID == v.ID {
				out[i].Attachments = append(out[i].Attachments, a)
			}
		}
		for _, m := range mounts {
			if m.VolumeID == v.ID {
				out[i].Mounts = append(out[i].Mounts, m)
			}
		}
	}
	return out, nil
}

// Get returns the tenant's volume name.
func (s *Service) Get(ctx context.Context, tenantID, name string) (Status, error) {
	list, err := s.List(ctx, tenantID)
	if err != nil {
		return Status{}, err
	}
	for _, st := range list {
		if st.Name == name {
			return st, nil
		}
	}
	return Status{}, fmt.Errorf("volume %s: %w", clip(name), errdefs.ErrNotFound)
}

// liveMounts selects the mounts whose sandbox is still creating or running.
func liveMounts(db *gorm.DB) *gorm.DB {
	return db.Model(&Mount{}).Select("volume_mounts.*").
		Joins("JOIN sandboxes ON sandboxes.id = volume_mounts.sandbox_id AND sandboxes.tenant_id = volume_mounts.tenant_id").
		Where("sandboxes.state IN ?", []string{"creating", "running"})
}

// busy reports, inside tx, why volume v cannot be changed: attached to a VM
// that is still active, or mounted by a live sandbox. Rows left by VMs
// that ended are dropped first.
func (s *Service) busy(tx *gorm.DB, v Volume) error {
	if err := dropEnded(tx, v.TenantID); err != nil {
		return err
	}
	var atts []Attachment
	if err := tx.Where("volume_id = ?", v.ID).Find(&atts).Error; err != nil {
		return err
	}
	if len(atts) > 0 {
		return fmt.Errorf("%w: volume %s is attached to vm %s; destroy the sandboxes that use it first", errdefs.ErrConflict, v.Name, atts[0].VMID)
	}
	return nil
}

// dropEnded deletes the tenant's attachments to VMs that ended (their
// disks went with them) and mounts of sandboxes that ended.
func dropEnded(tx *gorm.DB, tenantID string) error {
	active := []string{"booting", "running", "stopping"}
	if err := tx.Where("tenant_id = ? AND vm_id NOT IN (?)", tenantID,
		tx.Table("vms").Select("id").Where("tenant_id = ? AND state IN ?", tenantID, active)).Delete(&Attachment{}).Error; err != nil {
		return err
	}
	return tx.Where("tenant_id = ? AND sandbox_id NOT IN (?)", tenantID,
		tx.Table("sandboxes").Select("id").Where("tenant_id = ? AND state IN ?", tenantID, []string{"creating", "running"})).Delete(&Mount{}).Error
}

// Resize grows the tenant's detached volume name to sizeGiB (never
// shrinks), within the quota. Audited volume.resized.
func (s *Service) Resize(ctx context.Context, actor audit.Actor, tenantID, name string, sizeGiB int) (Volume, error) {
	if err := checkSize("size_gib", sizeGiB); err != nil {
		return Volume{}, err
	}
	defer s.lock(tenantID)()
	var v Volume
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		if v, err = byName(tx, tenantID, name); err != nil {
			return err
		}
		if sizeGiB < v.SizeGiB {
			return errdefs.Invalid("size_gib", "shrink", fmt.Sprintf("volumes only grow: %s has %d GiB", v.Name, v.SizeGiB))
		}
		if err := s.checkQuota(tx, tenantID, sizeGiB-v.SizeGiB); err != nil {
			return err
		}
		return s.busy(tx, v)
	})
	if err != nil {
		return Volume{}, fmt.Errorf("resize volume %s: %w", clip(name), err)
	}
	if sizeGiB == v.SizeGiB {
		return v, nil
	}
	// The tenant lock keeps attaches away while the image grows.
	if err := growImage(ctx, s.path(tenantID, v.ID), sizeGiB); err != nil {
		return Volume{}, fmt.Errorf("resize volume %s: %w", v.Name, err)
	}
	old := v.SizeGiB
	err = s.tx(context.WithoutCancel(ctx), func(tx *gorm.DB) error {
		v.SizeGiB, v.UpdatedAt = sizeGiB, s.clock.Now()
		if err := tx.Model(&Volume{}).Where("id = ?", v.ID).Updates(map[string]any{"size_gib": v.SizeGiB, "updated_at": v.UpdatedAt}).Error; err != nil {
			return err
		}
		// Billed per GiB-month: the old size up to now, the new one from now.
		if err := usage.CloseVolumePeriod(tx, tenantID, v.ID, v.UpdatedAt); err != nil {
			return err
		}
		if err := usage.OpenVolumePeriod(tx, tenantID, v.ID, v.Name, v.SizeGiB, v.UpdatedAt); err != nil {
			return err
		}
		return s.audit(tx, actor, tenantID, audit.TypeVolumeResized, v, map[string]any{"size_gib": sizeGiB, "old_size_gib": old})
	})
	if err != nil {
		return Volume{}, fmt.Errorf("resize volume %s: %w", v.Name, err)
	}
	return v, nil
}

// Delete removes the tenant's volume name and its image; one attached to a
// VM is a conflict. Audited volume.deleted.
func (s *Service) Delete(ctx context.Context, actor audit.Actor, tenantID, name string) error {
	defer s.lock(tenantID)()
	var v Volume
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := tenants.LockQuota(tx, tenantID, s.clock.Now()); err != nil {
			return err
		}
		var err error
		if v, err = byName(tx, tenantID, name); err != nil {
			return err
		}
		if err := s.busy(tx, v); err != nil {
			return err
		}
		if err := tx.Where("volume_id = ?", v.ID).Delete(&Mount{}).Error; err != nil {
			return err
		}
		if err := tx.Delete(&Volume{}, "id = ?", v.ID).Error; err != nil {
			return err
		}
		if err := usage.CloseVolumePeriod(tx, tenantID, v.ID, s.clock.Now()); err != nil {
			return err
		}
		return s.audit(tx, actor, tenantID, audit.TypeVolumeDeleted, v, map[string]any{"size_gib": v.SizeGiB})
	})
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", clip(name), err)
	}
	if err := os.Remove(s.path(tenantID, v.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove volume image", "volume", v.ID, "err", err)
	}
	return nil
}
