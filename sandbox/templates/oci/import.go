package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

// Audit event types of imports.
const (
	TypeImported     = audit.TypeTemplateImported
	TypeImportFailed = audit.TypeTemplateImportFailed
)

// MaxUploadEnv sets Config.MaxUpload.
const MaxUploadEnv = "STOCKADE_TEMPLATE_MAX_UPLOAD_BYTES"

// DefaultMaxUpload is Config.MaxUpload's default: 2 GiB.
const DefaultMaxUpload = 2 << 30

// Dialer connects as a tenant's traffic through the egress gateway
// (*egress.Gateway).
type Dialer interface {
	DialAs(ctx context.Context, tenantID, client, addr string) (net.Conn, error)
}

// Secrets reads a tenant's registry credentials (*secrets.Store).
type Secrets interface {
	Get(ctx context.Context, tenantID, name string) (secrets.Secret, error)
	Credentials(ctx context.Context, tenantID, sandboxID, host string) ([]secrets.Credential, bool, error)
}

// Config configures an Importer.
type Config struct {
	Templates *templates.Service
	// Quota reads the tenant's quota (tenants.Store.Quota).
	Quota func(ctx context.Context, tenantID string) (tenants.Quota, error)
	Audit *audit.Log
	// ScratchDir holds uploads and trees being laid out (emptied at New).
	ScratchDir string
	// MaxUpload bounds an upload (MaxUploadEnv); 0 is DefaultMaxUpload.
	MaxUpload int64
	// Registries are RegistriesEnv's hosts; none: pulling is refused.
	Registries []string
	Gateway    Dialer
	Secrets    Secrets
	Logger     *slog.Logger
}

// Importer imports tenant templates from OCI images.
type Importer struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and empties its scratch folder (what a crash left).
func New(cfg Config) (*Importer, error) {
	if cfg.Templates == nil || cfg.Quota == nil || cfg.Audit == nil || cfg.ScratchDir == "" || cfg.Gateway == nil || cfg.Secrets == nil {
		return nil, errors.New("template imports: Templates, Quota, Audit, ScratchDir, Gateway and Secrets are required")
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = DefaultMaxUpload
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.RemoveAll(cfg.ScratchDir); err != nil {
		return nil, fmt.Errorf("template imports: %w", err)
	}
	if err := os.MkdirAll(cfg.ScratchDir, 0o700); err != nil {
		return nil, fmt.Errorf("template imports: %w", err)
	}
	return &Importer{cfg: cfg, log: cfg.Logger.With("component", "template-import")}, nil
}

// MaxUpload is the bound of an upload.
func (im *Importer) MaxUpload() int64 { return im.cfg.MaxUpload }

// Upload is an image archive received into the scratch folder.
type Upload struct {
	dir, file string
}

// Close removes the upload.
func (u *Upload) Close() error {
	if u == nil {
		return nil
	}
	return os.RemoveAll(u.dir)
}

// TooLarge is the error of an upload over MaxUpload.
func (im *Importer) TooLarge(size int64) error {
	return &errdefs.TooLargeError{Op: "image upload", Size: size, Max: im.cfg.MaxUpload, Setting: MaxUploadEnv,
		Bound: fmt.Sprintf("%d bytes, set by %s", im.cfg.MaxUpload, MaxUploadEnv)}
}

// Receive copies an archive into the scratch folder, at most MaxUpload
// bytes (more: TooLarge, and nothing is kept).
func (im *Importer) Receive(r io.Reader) (*Upload, error) {
	dir, err := os.MkdirTemp(im.cfg.ScratchDir, "import-")
	if err != nil {
		return nil, fmt.Errorf("receive image: %w", err)
	}
	u := &Upload{dir: dir, file: filepath.Join(dir, "image.tar")}
	f, err := os.OpenFile(u.file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("receive image: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, im.cfg.MaxUpload+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || (err == nil && n > im.cfg.MaxUpload):
		u.Close()
		return nil, im.TooLarge(-1)
	case err != nil:
		u.Close()
		return nil, fmt.Errorf("receive image: %w", err)
	case n == 0:
		u.Close()
		return nil, errdefs.Required("image")
	}
	return u, nil
}

// Request is one import: an upload, or an image to pull.
type Request struct {
	Name  string
	Actor audit.Actor
	// Upload, or Image (a reference) with CredentialsSecret (a tenant
	// secret's name, or none).
	Upload            *Upload
	Image             string
	CredentialsSecret string
}

// Import makes a new version of the tenant's template req.Name from the
// image: nothing is written to the registry until the image is read,
// checked and laid out (a refused image leaves no row and no file), then
// Begin, Finish. Audited as template.imported or template.import_failed.
func (im *Importer) Import(ctx context.Context, tenantID string, req Request) (templates.Version, error) {
	v, src, err := im.run(ctx, tenantID, req)
	if err != nil {
		im.audit(ctx, tenantID, req, TypeImportFailed, "", map[string]any{"name": req.Name, "source": src, "reason": clip(err.Error(), 500)})
		return templates.Version{}, err
	}
	im.audit(ctx, tenantID, req, TypeImported, v.ID, map[string]any{"name": v.Name, "version": v.ID, "seq": v.Seq,
		"source": src, "source_ref": v.SourceRef, "digest": v.Digest, "size_bytes": v.SizeBytes})
	return v, nil
}

func (im *Importer) audit(ctx context.Context, tenantID string, req Request, typ, id string, details map[string]any) {
	e := req.Actor.Event(tenantID, typ, "template", id, details)
	if typ == TypeImportFailed {
		e.Outcome = audit.OutcomeFailure
	}
	if err := im.cfg.Audit.Record(context.WithoutCancel(ctx), e); err != nil {
		im.log.Error("audit "+typ, "tenant", tenantID, "err", err)
	}
}

func (im *Importer) run(ctx context.Context, tenantID string, req Request) (templates.Version, string, error) {
	src := "upload"
	if req.Upload == nil {
		src = req.Image
	}
	if err := im.cfg.Templates.CheckName(req.Name); err != nil {
		return templates.Version{}, src, err
	}
	scratch, err := os.MkdirTemp(im.cfg.ScratchDir, "tree-")
	if err != nil {
		return templates.Version{}, src, fmt.Errorf("import template %s: %w", req.Name, err)
	}
	defer os.RemoveAll(scratch)

	var img *Image
	var ref string
	if req.Upload != nil {
		if img, err = OpenArchive(req.Upload.file, scratch, DefaultMaxEntries); err != nil {
			return templates.Version{}, src, err
		}
		ref = "upload@" + img.Digest.String()
	} else {
		if img, ref, err = im.pull(ctx, tenantID, req); err != nil {
			return templates.Version{}, src, err
		}
	}
	room, err := im.room(ctx, tenantID)
	if err != nil {
		return templates.Version{}, src, err
	}
	tree := filepath.Join(scratch, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return templates.Version{}, src, fmt.Errorf("import template %s: %w", req.Name, err)
	}
	st, err := img.Flatten(ctx, tree, Limits{MaxBytes: room, Quota: tenants.QuotaMaxTemplateMiB})
	if err != nil {
		return templates.Version{}, src, err
	}
	env, user, workdir, err := img.Defaults(tree)
	if err != nil {
		return templates.Version{}, src, err
	}
	d := templates.Defaults{Env: env, User: user, Workdir: workdir}
	// What mkfs will make of it (hypervisor/image's sizing).
	estimate := st.Bytes*5/4 + int64(st.Entries)*256 + 16<<20
	v, err := im.cfg.Templates.Begin(ctx, tenantID, templates.Begin{Name: req.Name, Source: templates.SourceOCI, SourceRef: ref,
		Actor: req.Actor, Estimate: estimate, Defaults: d})
	if err != nil {
		return templates.Version{}, src, err
	}
	out, err := im.cfg.Templates.Finish(ctx, tenantID, v.ID, tree, d)
	if err != nil {
		if ferr := im.cfg.Templates.Fail(context.WithoutCancel(ctx), tenantID, v.ID, err); ferr != nil {
			im.log.Error("fail template version", "tenant", tenantID, "version", v.ID, "err", ferr)
		}
		return templates.Version{}, src, err
	}
	return out, src, nil
}

// room is what the tenant's template quota has left, in bytes.
func (im *Importer) room(ctx context.Context, tenantID string) (int64, error) {
	q, err := im.cfg.Quota(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	used, err := im.cfg.Templates.Used(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	room := int64(q.MaxTemplateMiB)<<20 - used
	if room <= 0 {
		return 0, &errdefs.QuotaError{Quota: tenants.QuotaMaxTemplateMiB, Limit: q.MaxTemplateMiB,
			Detail: fmt.Sprintf("the tenant's templates use all of its %d MiB", q.MaxTemplateMiB)}
	}
	return room, nil
}

// pull fetches req.Image through the tenant's egress, with the named
// secret's credentials; ref is the image's name and digest.
func (im *Importer) pull(ctx context.Context, tenantID string, req Request) (*Image, string, error) {
	p := &Puller{Allowed: im.cfg.Registries, MaxBytes: im.cfg.MaxUpload,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			return im.cfg.Gateway.DialAs(ctx, tenantID, "template-import:"+req.Name, addr)
		}}
	r, err := p.ParseRef(req.Image)
	if err != nil {
		return nil, "", err
	}
	var cred *Credentials
	if req.CredentialsSecret != "" {
		if cred, err = im.credentials(ctx, tenantID, req.CredentialsSecret, r.Context().RegistryStr()); err != nil {
			return nil, "", err
		}
	}
	img, err := p.Pull(ctx, r, cred)
	if err != nil {
		return nil, "", err
	}
	return img, r.Context().Name() + "@" + img.Digest.String(), nil
}

// credentials reads the named secret, which must be live and scoped to
// the registry's host.
func (im *Importer) credentials(ctx context.Context, tenantID, name, registry string) (*Credentials, error) {
	sec, err := im.cfg.Secrets.Get(ctx, tenantID, name)
	if errdefs.IsNotFound(err) {
		return nil, errdefs.Invalid("credentials_secret", "unknown", fmt.Sprintf("no secret called %s", name))
	}
	if err != nil {
		return nil, err
	}
	if sec.State != secrets.StateActive {
		return nil, errdefs.Invalid("credentials_secret", "state", fmt.Sprintf("secret %s is %s", name, sec.State))
	}
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	creds, _, err := im.cfg.Secrets.Credentials(ctx, tenantID, "", host)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(creds, func(c secrets.Credential) bool { return c.Name == name })
	if i < 0 || creds[i].Inject == nil {
		return nil, errdefs.Invalid("credentials_secret", "secret_hosts",
			fmt.Sprintf("secret %s may not be sent to %s: add the registry's host to the secret's hosts", name, host))
	}
	hosts := sec.Hosts
	return &Credentials{Secret: name, Value: creds[i].Value, Hosts: func(h string) bool {
		return slices.ContainsFunc(hosts, func(p string) bool { return secrets.MatchHost(p, strings.ToLower(h)) })
	}}, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// CheckName is templates.Service.CheckName: whether name may be a tenant
// template's (asked before an upload is read).
func (im *Importer) CheckName(name string) error { return im.cfg.Templates.CheckName(name) }
