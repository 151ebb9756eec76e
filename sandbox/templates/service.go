package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// reservedNames are the platform's template names, built or not: no
// tenant template may take one.
var reservedNames = []string{image.TemplateBusybox, image.TemplateDebian, "node", "build"}

// Config configures a Service.
type Config struct {
	DB *gorm.DB
	// DataDir is the server's data dir: versions live under
	// DataDir/tenant-templates/<tenant>/.
	DataDir string
	// Builtins returns the platform's templates (the image manifest's).
	Builtins func() []image.Template
	Clock    clockwork.Clock
	Logger   *slog.Logger
}

// Service is the template registry.
type Service struct {
	db       *gorm.DB
	dir      string
	builtins func() []image.Template
	clock    clockwork.Clock
	log      *slog.Logger
}

// New makes the registry.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.DataDir == "" {
		return nil, errors.New("templates: DB and DataDir are required")
	}
	// Readable by QEMU's user, like the built-ins' images; staging stays private.
	dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "tenant-templates"))
	if err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("templates: %w", err)
	}
	s := &Service{db: cfg.DB, dir: dir, builtins: cfg.Builtins, clock: cfg.Clock, log: cfg.Logger}
	if s.builtins == nil {
		s.builtins = func() []image.Template { return nil }
	}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

func (s *Service) now() time.Time { return s.clock.Now().UTC().Truncate(time.Microsecond) }

// Begin is a new version to reserve.
type Begin struct {
	Name string
	// Source is SourceRecipe or SourceOCI.
	Source string
	// SourceRef is the recipe's digest or the image's reference/digest.
	SourceRef string
	// CreatedBy names who asked (an actor's name); Actor, when set, is the
	// audit actor of template.created (CreatedBy defaults to its name).
	CreatedBy string
	Actor     audit.Actor
	// Estimate is the image size the builder expects, in bytes, charged
	// against the quota until Finish knows the real size.
	Estimate int64
	Defaults Defaults
}

// CheckName reports, as a FieldError on "name" or an ErrConflict, whether
// name may be a tenant template's name.
func (s *Service) CheckName(name string) error {
	if !NameRE.MatchString(name) {
		return errdefs.Invalid("name", "template_name", "must be 1-32 of lowercase letters, digits, '_' and '-', starting with a letter or digit")
	}
	if s.isBuiltin(name) {
		return fmt.Errorf("template %s: %w: a built-in template has that name", name, errdefs.ErrConflict)
	}
	return nil
}

func (s *Service) isBuiltin(name string) bool {
	if slices.Contains(reservedNames, name) {
		return true
	}
	for _, b := range s.builtins() {
		if b.Name == name {
			return true
		}
	}
	return false
}

// checkDefaults bounds what a builder gives (it may come from an image).
func checkDefaults(d Defaults) error {
	if len(d.Env) > 64 {
		return errdefs.Invalid("env", "size", "at most 64 variables")
	}
	n := 0
	for k, v := range d.Env {
		n += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return errdefs.Invalid("env", "name", fmt.Sprintf("bad variable %q", clipStr(k, 64)))
		}
	}
	if n > 64<<10 {
		return errdefs.Invalid("env", "size", "at most 64 KiB")
	}
	if len(d.User) > 64 || strings.ContainsRune(d.User, 0) {
		return errdefs.Invalid("user", "format", "at most 64 bytes")
	}
	if d.Workdir != "" && (!strings.HasPrefix(d.Workdir, "/") || len(d.Workdir) > 1024 || strings.ContainsRune(d.Workdir, 0) ||
		slices.Contains(strings.Split(d.Workdir, "/"), "..")) {
		return errdefs.Invalid("workdir", "format", "must be an absolute path without '..', at most 1024 bytes")
	}
	return nil
}

func clipStr(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// InVMName is the guest's name of a version: "t" and the last 12 hex
// digits of its id (UUIDv7's random part), unique per VM in practice and
// checked against the VM's other disks when attached.
func InVMName(versionID string) string {
	h := strings.ReplaceAll(versionID, "-", "")
	return "t" + h[len(h)-12:]
}

// usedBytes is what the tenant's versions charge now (inside tx).
func usedBytes(tx *gorm.DB, tenantID string) (int64, error) {
	var used struct{ N int64 }
	err := tx.Raw(`SELECT COALESCE(SUM(CASE WHEN state = ? THEN size_bytes WHEN state = ? THEN estimate_bytes ELSE 0 END), 0) AS n
		FROM template_versions WHERE tenant_id = ? AND deleted_at IS NULL`, StateReady, StateBuilding, tenantID).Scan(&used).Error
	return used.N, err
}

// checkQuota locks the tenant's quota and returns a *errdefs.QuotaError
// when adding want bytes (beyond what is charged now, minus except) passes it.
func (s *Service) checkQuota(tx *gorm.DB, tenantID string, want, except int64) error {
	q, err := tenants.LockQuota(tx, tenantID, s.now())
	if err != nil {
		return err
	}
	used, err := usedBytes(tx, tenantID)
	if err != nil {
		return err
	}
	const mib = 1 << 20
	total := used - except + want
	if total > int64(q.MaxTemplateMiB)*mib {
		return &errdefs.QuotaError{Quota: tenants.QuotaMaxTemplateMiB, Limit: q.MaxTemplateMiB, Want: int((total + mib - 1) / mib)}
	}
	return nil
}

// Begin reserves a new version of the tenant's template b.Name (a new
// template, or a new version of one of the same source kind): it checks
// the name (errdefs.FieldError; a built-in's name is ErrConflict), the
// quota against b.Estimate, and writes a row in state building.
func (s *Service) Begin(ctx context.Context, tenantID string, b Begin) (Version, error) {
	if err := s.CheckName(b.Name); err != nil {
		return Version{}, err
	}
	if b.Source != SourceRecipe && b.Source != SourceOCI {
		return Version{}, errdefs.Invalid("source", "unknown", "must be recipe or oci")
	}
	if b.Estimate < 0 {
		return Version{}, errdefs.Invalid("estimate", "range", "must not be negative")
	}
	if err := checkDefaults(b.Defaults); err != nil {
		return Version{}, err
	}
	if b.CreatedBy == "" {
		b.CreatedBy = b.Actor.Name
	}
	defs, err := json.Marshal(b.Defaults)
	if err != nil {
		return Version{}, fmt.Errorf("begin template %s: %w", b.Name, err)
	}
	vid, err := newID()
	if err != nil {
		return Version{}, fmt.Errorf("begin template %s: %w", b.Name, err)
	}
	now := s.now()
	v := Version{ID: vid, TenantID: tenantID, Name: b.Name, InVMName: InVMName(vid), Source: b.Source,
		SourceRef: clipStr(b.SourceRef, 1000), EstimateBytes: b.Estimate, State: StateBuilding, DefaultsJSON: string(defs),
		Defaults: b.Defaults, CreatedBy: b.CreatedBy, CreatedAt: now}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.checkQuota(tx, tenantID, b.Estimate, 0); err != nil {
			return err
		}
		var t Template
		err := tx.Take(&t, "tenant_id = ? AND name = ? AND deleted_at IS NULL", tenantID, b.Name).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			tid, err := newID()
			if err != nil {
				return err
			}
			t = Template{ID: tid, TenantID: tenantID, Name: b.Name, Source: b.Source, CreatedBy: b.CreatedBy, CreatedAt: now}
			if err := tx.Create(&t).Error; err != nil {
				return err
			}
		case err != nil:
			return err
		case t.Source != b.Source:
			return fmt.Errorf("%w: template %s is built from %s, not %s", errdefs.ErrConflict, b.Name, t.Source, b.Source)
		}
		var seq struct{ N int }
		if err := tx.Raw(`SELECT COALESCE(MAX(seq), 0) AS n FROM template_versions WHERE template_id = ?`, t.ID).Scan(&seq).Error; err != nil {
			return err
		}
		v.TemplateID, v.Seq = t.ID, seq.N+1
		return tx.Create(&v).Error
	})
	if err != nil {
		return Version{}, fmt.Errorf("begin template %s: %w", b.Name, err)
	}
	return v, nil
}

func (s *Service) tenantDir(tenantID string) (string, error) {
	if !safeID(tenantID) {
		return "", fmt.Errorf("templates: bad tenant id %q", clipStr(tenantID, 64))
	}
	return filepath.Join(s.dir, tenantID), nil
}

func safeID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (s *Service) stagingDir(tenantID, versionID string) (string, error) {
	if !safeID(tenantID) || !safeID(versionID) {
		return "", fmt.Errorf("templates: bad id")
	}
	return filepath.Join(s.dir, ".staging", tenantID, versionID), nil
}

// Staging gives the builder of versionID a scratch directory under the
// data dir (same file system as the images), removed by Finish and Fail.
// It makes it on first use; the version must be the tenant's and building.
func (s *Service) Staging(tenantID, versionID string) (string, error) {
	v, err := s.version(context.Background(), tenantID, versionID)
	if err != nil {
		return "", err
	}
	if v.State != StateBuilding {
		return "", fmt.Errorf("staging of template version %s: %w: it is %s", versionID, errdefs.ErrConflict, v.State)
	}
	d, err := s.stagingDir(tenantID, versionID)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("staging of template version %s: %w", versionID, err)
	}
	return d, nil
}

func (s *Service) version(ctx context.Context, tenantID, versionID string) (Version, error) {
	var v Version
	if err := s.db.WithContext(ctx).Take(&v, "tenant_id = ? AND id = ?", tenantID, versionID).Error; err != nil {
		return Version{}, fmt.Errorf("template version %s: %w", versionID, notFound(err))
	}
	return v, nil
}

// VersionByID returns the tenant's version with that id (deleted ones
// too, for the record).
func (s *Service) VersionByID(ctx context.Context, tenantID, versionID string) (Version, error) {
	return s.version(ctx, tenantID, versionID)
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return errdefs.ErrNotFound
	}
	return err
}

// Finish packs tree (a directory laid out as the template's root) into the
// version's read-only ext4 image, enforces the quota on its real size,
// moves it under the data dir and marks the version ready with d as its
// defaults. Any error marks the version failed and removes its files (the
// error is returned). tree is left as it is unless it lies in Staging's
// directory, which is removed.
func (s *Service) Finish(ctx context.Context, tenantID, versionID, tree string, d Defaults) (Version, error) {
	v, err := s.version(ctx, tenantID, versionID)
	if err != nil {
		return Version{}, err
	}
	if v.State != StateBuilding {
		return Version{}, fmt.Errorf("finish template version %s: %w: it is %s", versionID, errdefs.ErrConflict, v.State)
	}
	out, err := s.finish(ctx, v, tree, d)
	if err != nil {
		if ferr := s.Fail(context.WithoutCancel(ctx), tenantID, versionID, err); ferr != nil {
			s.log.Error("mark template version failed", "version", versionID, "err", ferr)
		}
		return Version{}, fmt.Errorf("finish template %s: %w", v.Name, err)
	}
	return out, nil
}

func (s *Service) finish(ctx context.Context, v Version, tree string, d Defaults) (Version, error) {
	if err := checkDefaults(d); err != nil {
		return Version{}, err
	}
	defs, err := json.Marshal(d)
	if err != nil {
		return Version{}, err
	}
	tdir, err := s.tenantDir(v.TenantID)
	if err != nil {
		return Version{}, err
	}
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return Version{}, err
	}
	staging, err := s.stagingDir(v.TenantID, v.ID)
	if err != nil {
		return Version{}, err
	}
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return Version{}, err
	}
	defer os.RemoveAll(staging)
	tmp := filepath.Join(staging, "image.ext4")
	os.Remove(tmp)
	packed, err := image.PackTemplate(ctx, tree, tmp, v.InVMName, v.ID)
	if err != nil {
		return Version{}, err
	}
	final := filepath.Join(tdir, v.ID+".ext4")
	now := s.now()
	v.Digest, v.SizeBytes, v.State, v.ReadyAt, v.Path = "sha256:"+packed.SHA256, packed.Size, StateReady, &now, final
	v.DefaultsJSON, v.Defaults = string(defs), d
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.checkQuota(tx, v.TenantID, packed.Size, v.EstimateBytes); err != nil {
			return err
		}
		// QEMU (its own user on most hosts) opens it read-only.
		if err := os.Chmod(tmp, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		res := tx.Model(&Version{}).Where("id = ? AND state = ?", v.ID, StateBuilding).Updates(map[string]any{
			"digest": v.Digest, "size_bytes": v.SizeBytes, "state": v.State, "ready_at": now, "path": final, "defaults": v.DefaultsJSON})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("%w: the version is no longer building", errdefs.ErrConflict)
		}
		return audit.Write(tx, s.event(v, audit.TypeTemplateCreated, map[string]any{
			"name": v.Name, "version": v.ID, "seq": v.Seq, "source": v.Source, "source_ref": v.SourceRef,
			"digest": v.Digest, "size_bytes": v.SizeBytes}))
	})
	if err != nil {
		os.Remove(final)
		return Version{}, err
	}
	return v, nil
}

func (s *Service) event(v Version, typ string, details map[string]any) audit.Event {
	e := audit.Actor{Kind: audit.ActorSystem, ID: "templates", Name: v.CreatedBy}.Event(v.TenantID, typ, "template", v.Name, details)
	e.Time = s.now()
	return e
}

// Fail marks a building version failed with reason, removing any file it
// had. A version no longer building is left as it is.
func (s *Service) Fail(ctx context.Context, tenantID, versionID string, reason error) error {
	v, err := s.version(ctx, tenantID, versionID)
	if err != nil {
		return err
	}
	msg := "failed"
	if reason != nil {
		msg = clipStr(reason.Error(), 2000)
	}
	if st, err := s.stagingDir(tenantID, versionID); err == nil {
		os.RemoveAll(st)
	}
	if err := s.db.WithContext(ctx).Model(&Version{}).Where("id = ? AND state = ?", v.ID, StateBuilding).
		Updates(map[string]any{"state": StateFailed, "reason": msg}).Error; err != nil {
		return fmt.Errorf("fail template version %s: %w", versionID, err)
	}
	if tdir, err := s.tenantDir(tenantID); err == nil {
		os.Remove(filepath.Join(tdir, v.ID+".ext4"))
	}
	return s.dropEmptyTemplate(ctx, v.TemplateID)
}

// dropEmptyTemplate marks a template deleted when it never had a ready
// version and none is building (a failed first build leaves no template).
func (s *Service) dropEmptyTemplate(ctx context.Context, templateID string) error {
	var n int64
	if err := s.db.WithContext(ctx).Model(&Version{}).Where("template_id = ? AND state IN ? AND deleted_at IS NULL",
		templateID, []State{StateReady, StateBuilding}).Count(&n).Error; err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	now := s.now()
	return s.db.WithContext(ctx).Model(&Template{}).Where("id = ? AND deleted_at IS NULL", templateID).
		Update("deleted_at", now).Error
}

// inUse counts the tenant's sandboxes that have not ended and run one of
// versionIDs (sandboxes.template_version holds a tenant version's id).
func inUse(tx *gorm.DB, tenantID string, versionIDs []string) (int, error) {
	if len(versionIDs) == 0 {
		return 0, nil
	}
	var n int64
	err := tx.Table("sandboxes").Where("tenant_id = ? AND template_version IN ? AND state NOT IN ?",
		tenantID, versionIDs, []string{"failed", "destroyed"}).Count(&n).Error
	return int(n), err
}

// Resolve returns the newest ready version of the tenant's template name:
// errdefs.ErrNotFound when the tenant has none (another tenant's, a
// building or failed one).
func (s *Service) Resolve(ctx context.Context, tenantID, name string) (Version, error) {
	var v Version
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND name = ? AND state = ? AND deleted_at IS NULL", tenantID, name, StateReady).
		Order("seq DESC").Take(&v).Error
	if err != nil {
		return Version{}, fmt.Errorf("template %s: %w", name, notFound(err))
	}
	return v, nil
}

// List returns every template the tenant can see: the built-ins, then its
// own by name, each with its versions (failed ones too, not deleted ones).
func (s *Service) List(ctx context.Context, tenantID string) ([]Entry, error) {
	var out []Entry
	for _, b := range s.builtins() {
		out = append(out, builtinEntry(b))
	}
	var ts []Template
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND deleted_at IS NULL", tenantID).Order("name").Find(&ts).Error; err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var vs []Version
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND deleted_at IS NULL", tenantID).Order("seq DESC").Find(&vs).Error; err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	byT := map[string][]Version{}
	for _, v := range vs {
		byT[v.TemplateID] = append(byT[v.TemplateID], v)
	}
	for _, t := range ts {
		e, err := s.entry(ctx, t, byT[t.ID])
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

func builtinEntry(b image.Template) Entry {
	return Entry{Name: b.Name, Source: SourceBuiltin, Builtin: true, HasReady: true,
		Current: Version{Name: b.Name, InVMName: b.Name, Source: SourceBuiltin, SourceRef: b.Version, Digest: b.Version,
			SizeBytes: b.SizeBytes, State: StateReady}}
}

func (s *Service) entry(ctx context.Context, t Template, vs []Version) (Entry, error) {
	e := Entry{Name: t.Name, Source: t.Source, Versions: vs, CreatedAt: t.CreatedAt, CreatedBy: t.CreatedBy}
	ids := make([]string, 0, len(vs))
	for _, v := range vs {
		ids = append(ids, v.ID)
		if !e.HasReady && v.State == StateReady {
			e.Current, e.HasReady = v, true
		}
	}
	n, err := inUse(s.db.WithContext(ctx), t.TenantID, ids)
	if err != nil {
		return Entry{}, err
	}
	e.InUse = n
	return e, nil
}

// Get returns one template the tenant can see by name (a built-in or its
// own); errdefs.ErrNotFound otherwise.
func (s *Service) Get(ctx context.Context, tenantID, name string) (Entry, error) {
	for _, b := range s.builtins() {
		if b.Name == name {
			return builtinEntry(b), nil
		}
	}
	var t Template
	if err := s.db.WithContext(ctx).Take(&t, "tenant_id = ? AND name = ? AND deleted_at IS NULL", tenantID, name).Error; err != nil {
		return Entry{}, fmt.Errorf("template %s: %w", name, notFound(err))
	}
	var vs []Version
	if err := s.db.WithContext(ctx).Where("template_id = ? AND deleted_at IS NULL", t.ID).Order("seq DESC").Find(&vs).Error; err != nil {
		return Entry{}, fmt.Errorf("template %s: %w", name, err)
	}
	return s.entry(ctx, t, vs)
}

// Delete removes the tenant's template name: every version's image goes,
// the rows are marked deleted (template.deleted is audited). It returns
// the versions removed, for the caller to detach from the VMs holding
// them. A built-in, a template a sandbox that has not ended runs, or one
// with a build under way is ErrConflict; another tenant's is ErrNotFound.
func (s *Service) Delete(ctx context.Context, actor audit.Actor, tenantID, name string) ([]Version, error) {
	if s.isBuiltin(name) {
		if _, err := s.Get(ctx, tenantID, name); err == nil {
			return nil, fmt.Errorf("delete template %s: %w: built-in templates cannot be deleted", name, errdefs.ErrConflict)
		}
	}
	var gone []Version
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if _, err := tenants.LockQuota(tx, tenantID, s.now()); err != nil {
			return err
		}
		var t Template
		if err := tx.Take(&t, "tenant_id = ? AND name = ? AND deleted_at IS NULL", tenantID, name).Error; err != nil {
			return notFound(err)
		}
		var vs []Version
		if err := tx.Where("template_id = ? AND deleted_at IS NULL", t.ID).Find(&vs).Error; err != nil {
			return err
		}
		ids := make([]string, 0, len(vs))
		for _, v := range vs {
			ids = append(ids, v.ID)
			if v.State == StateBuilding {
				return fmt.Errorf("%w: version %d is still building", errdefs.ErrConflict, v.Seq)
			}
		}
		n, err := inUse(tx, tenantID, ids)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %d sandbox(es) run it; delete them first", errdefs.ErrConflict, n)
		}
		now := s.now()
		if err := tx.Model(&Version{}).Where("template_id = ? AND deleted_at IS NULL", t.ID).Update("deleted_at", now).Error; err != nil {
			return err
		}
		if err := tx.Model(&Template{}).Where("id = ?", t.ID).Update("deleted_at", now).Error; err != nil {
			return err
		}
		gone = vs
		e := actor.Event(tenantID, audit.TypeTemplateDeleted, "template", name, map[string]any{"versions": len(vs)})
		e.Time = now
		return audit.Write(tx, e)
	})
	if err != nil {
		return nil, fmt.Errorf("delete template %s: %w", name, err)
	}
	for _, v := range gone {
		s.removeFile(v)
	}
	return gone, nil
}

func (s *Service) removeFile(v Version) {
	tdir, err := s.tenantDir(v.TenantID)
	if err != nil {
		return
	}
	p := filepath.Join(tdir, v.ID+".ext4")
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove template image", "path", p, "err", err)
	}
}

// Usage is one tenant's template storage.
type Usage struct {
	TenantID  string
	Templates int
	Versions  int
	Bytes     int64
	LimitMiB  int
}

// Usage returns every tenant's template storage (operators), by tenant.
func (s *Service) Usage(ctx context.Context) ([]Usage, error) {
	var rows []struct {
		TenantID  string
		Templates int
		Versions  int
		Bytes     int64
	}
	err := s.db.WithContext(ctx).Raw(`SELECT tenant_id, COUNT(DISTINCT template_id) AS templates, COUNT(*) AS versions,
		COALESCE(SUM(CASE WHEN state = ? THEN size_bytes WHEN state = ? THEN estimate_bytes ELSE 0 END), 0) AS bytes
		FROM template_versions WHERE deleted_at IS NULL AND state <> ? GROUP BY tenant_id ORDER BY tenant_id`,
		StateReady, StateBuilding, StateFailed).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("template usage: %w", err)
	}
	out := make([]Usage, 0, len(rows))
	for _, r := range rows {
		var q tenants.Quota
		lim := tenants.DefaultQuota().MaxTemplateMiB
		if err := s.db.WithContext(ctx).Take(&q, "tenant_id = ?", r.TenantID).Error; err == nil {
			lim = q.MaxTemplateMiB
		}
		out = append(out, Usage{TenantID: r.TenantID, Templates: r.Templates, Versions: r.Versions, Bytes: r.Bytes, LimitMiB: lim})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TenantID < out[j].TenantID })
	return out, nil
}

// Used returns what the tenant's templates charge against its quota.
func (s *Service) Used(ctx context.Context, tenantID string) (int64, error) {
	n, err := usedBytes(s.db.WithContext(ctx), tenantID)
	if err != nil {
		return 0, fmt.Errorf("template usage of tenant %s: %w", tenantID, err)
	}
	return n, nil
}

// Ready returns the newest ready version of each of the tenant's
// templates, by name (what the create form offers next to the built-ins).
func (s *Service) Ready(ctx context.Context, tenantID string) ([]Version, error) {
	var vs []Version
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND state = ? AND deleted_at IS NULL", tenantID, StateReady).
		Order("name, seq DESC").Find(&vs).Error; err != nil {
		return nil, fmt.Errorf("ready templates of tenant %s: %w", tenantID, err)
	}
	out := vs[:0]
	for _, v := range vs {
		if len(out) == 0 || out[len(out)-1].Name != v.Name {
			out = append(out, v)
		}
	}
	return out, nil
}
