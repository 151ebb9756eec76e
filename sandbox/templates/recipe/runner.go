package recipe

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Setup step (step 4): the stage tree is packed into a temporary builder
// image (templates.Service.BuilderImage: no row, never listed, removed at
// the end), a sandbox of the build's tenant starts from it (the tenant's
// policy: limits, egress, lifetime; metered like any sandbox; labelled
// MetaTemplateBuild), each command runs in turn as the sandbox user
// (`/bin/sh -c`) in the recipe's workdir with its env, output into the
// build log. Then the sandbox is paused, its writable layer read
// (sandbox.Service.ReadUpper: bounded by what the tenant's template quota
// has left) and applied over the tree with the OCI importer's safe writer
// (oci.ApplyLayer). What is left out of the layer: see Excluded.

// MetaTemplateBuild labels a builder sandbox with its build's id (the
// template's name under MetaTemplateName).
const (
	MetaTemplateBuild = "stockade.template_build"
	MetaTemplateName  = "stockade.template"
)

// Sandboxes is what the setup step needs of the sandbox service
// (*sandbox.Service).
type Sandboxes interface {
	Create(ctx context.Context, actor audit.Actor, tenantID string, spec sandbox.Spec) (sandbox.Sandbox, error)
	Exec(ctx context.Context, actor audit.Actor, tenantID, id string, req sandbox.ExecRequest, stdout, stderr io.Writer) (sandbox.ExecResult, error)
	Pause(ctx context.Context, actor audit.Actor, tenantID, id string) (sandbox.Sandbox, error)
	ReadUpper(ctx context.Context, tenantID, id string, maxBytes int64, quota string, w io.Writer) (int64, error)
	Destroy(ctx context.Context, actor audit.Actor, tenantID, id string) (sandbox.Sandbox, error)
	DetachTemplateVersions(ctx context.Context, tenantID string, versions []templates.Version)
}

// BuilderImages makes and removes builder images (*templates.Service).
type BuilderImages interface {
	BuilderImage(ctx context.Context, tenantID, versionID, tree string) (templates.Version, error)
	RemoveBuilderImage(b templates.Version) error
	Used(ctx context.Context, tenantID string) (int64, error)
}

// SandboxRunner is the Runner of a server: setup commands in a builder
// sandbox.
type SandboxRunner struct {
	Sandboxes Sandboxes
	Images    BuilderImages
	// Quota reads the tenant's quota (tenants.Store.Quota).
	Quota func(ctx context.Context, tenantID string) (tenants.Quota, error)
}

// Excluded are the paths (relative to the root) whose changes a builder
// sandbox does not bring back: the per-sandbox folders (/workspace, /tmp,
// the kernel's and crun's mount points), the caches of the sandbox user's
// and root's homes, and what the agent itself puts into every sandbox (the
// tenant's CA, and the system bundle it appends it to).
var Excluded = []string{"workspace", "tmp", "var/tmp", "run", "proc", "sys", "dev", "home/sandbox/.cache", "root/.cache",
	"etc/stockade", "etc/ssl/certs/ca-certificates.crt"}

func excluded(rel string) bool {
	for _, e := range Excluded {
		if rel == e || strings.HasPrefix(rel, e+"/") {
			return true
		}
	}
	return false
}

// Run implements Runner.
func (r *SandboxRunner) Run(ctx context.Context, actor audit.Actor, s Setup) (err error) {
	log := s.Log
	if err := ensureWorkdir(s.Tree, s.Workdir); err != nil {
		return err
	}
	b, err := r.Images.BuilderImage(ctx, s.Tenant, s.VersionID, s.Tree)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	// Whatever happens: the builder sandbox destroyed, the image's disk
	// detached from the tenant's VMs (a failed create may have plugged
	// it), then the image removed.
	cleanup := context.WithoutCancel(ctx)
	var sb sandbox.Sandbox
	defer func() {
		if sb.ID != "" {
			if _, derr := r.Sandboxes.Destroy(cleanup, actor, s.Tenant, sb.ID); derr != nil && !errdefs.IsNotFound(derr) && err == nil {
				err = fmt.Errorf("setup: destroy the builder sandbox: %w", derr)
			}
			fmt.Fprintf(log, "builder sandbox %s destroyed\n", sb.ID)
		}
		r.Sandboxes.DetachTemplateVersions(cleanup, s.Tenant, []templates.Version{b})
		if rerr := r.Images.RemoveBuilderImage(b); rerr != nil && err == nil {
			err = rerr
		}
	}()
	sb, err = r.Sandboxes.Create(ctx, actor, s.Tenant, sandbox.Spec{Builder: &b,
		Metadata: map[string]string{MetaTemplateBuild: s.BuildID, MetaTemplateName: b.Name}})
	if err != nil {
		return fmt.Errorf("setup: start the builder sandbox: %w", err)
	}
	fmt.Fprintf(log, "builder sandbox %s started\n", sb.ID)
	for i, cmd := range s.Commands {
		fmt.Fprintf(log, "$ %s\n", cmd)
		res, err := r.Sandboxes.Exec(ctx, actor, s.Tenant, sb.ID, sandbox.ExecRequest{Cmd: []string{"/bin/sh", "-c", cmd},
			Cwd: s.Workdir, Env: s.Env}, log, log)
		if err != nil {
			return fmt.Errorf("setup command %d (%.200q): %w", i+1, cmd, err)
		}
		if res.ExitCode != 0 || res.Reason != "exited" {
			return fmt.Errorf("setup command %d (%.200q) failed: exit code %d (%s)", i+1, cmd, res.ExitCode, res.Reason)
		}
	}
	if _, err := r.Sandboxes.Pause(ctx, actor, s.Tenant, sb.ID); err != nil {
		return fmt.Errorf("setup: pause the builder sandbox: %w", err)
	}
	st, err := r.bringBack(ctx, s, sb.ID)
	if err != nil {
		return fmt.Errorf("setup: bring the changes back: %w", err)
	}
	fmt.Fprintf(log, "setup changed %d entries, %d bytes of files\n", st.Entries, st.Bytes)
	return nil
}

// room is what the tenant's template quota has left, in bytes.
func (r *SandboxRunner) room(ctx context.Context, tenantID string) (int64, error) {
	q, err := r.Quota(ctx, tenantID)
	if err != nil {
		return 0, err
	}
	used, err := r.Images.Used(ctx, tenantID)
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

// bringBack reads the paused sandbox's writable layer and applies it over
// the tree, leaving Excluded out.
func (r *SandboxRunner) bringBack(ctx context.Context, s Setup, id string) (oci.Stats, error) {
	room, err := r.room(ctx, s.Tenant)
	if err != nil {
		return oci.Stats{}, err
	}
	// The stream is bounded by the room left plus its headers.
	maxStream := room + int64(oci.DefaultMaxEntries)*1024
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := r.Sandboxes.ReadUpper(ctx, s.Tenant, id, maxStream, tenants.QuotaMaxTemplateMiB, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	fr, fw := io.Pipe()
	go func() { fw.CloseWithError(filterLayer(pr, fw)) }()
	st, err := oci.ApplyLayer(s.Tree, fr, oci.Limits{MaxBytes: room, Quota: tenants.QuotaMaxTemplateMiB})
	fr.CloseWithError(errors.New("layer applied"))
	pr.CloseWithError(errors.New("layer applied"))
	rerr := <-done
	if err != nil {
		return st, err
	}
	return st, rerr
}

// filterLayer copies the tar stream r to w without the Excluded entries
// (whiteouts of an excluded path too).
func filterLayer(r io.Reader, w io.Writer) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("read the writable layer: %w", err)
		}
		name := strings.Trim(path.Clean("/"+hdr.Name), "/")
		dir, base := path.Split(name)
		target := name
		if strings.HasPrefix(base, ".wh.") && base != ".wh..wh..opq" {
			target = dir + strings.TrimPrefix(base, ".wh.")
		}
		if excluded(name) || excluded(target) {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// ensureWorkdir makes the recipe's workdir in the tree (the sandbox
// user's) when the base lacks it, so that setup commands can run there.
func ensureWorkdir(tree, workdir string) error {
	if workdir == "" || workdir == "/" {
		return nil
	}
	cur := tree
	for _, e := range strings.Split(strings.Trim(path.Clean(workdir), "/"), "/") {
		if e == "" || e == ".." {
			return errdefs.Invalid("/workdir", "path", "must be a clean absolute path")
		}
		cur = filepath.Join(cur, e)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return fmt.Errorf("make the workdir: %w", err)
			}
			if os.Geteuid() == 0 {
				if err := os.Lchown(cur, 1000, 1000); err != nil {
					return fmt.Errorf("make the workdir: %w", err)
				}
			}
		case err != nil:
			return fmt.Errorf("make the workdir: %w", err)
		case !fi.IsDir():
			return errdefs.Invalid("/workdir", "path", fmt.Sprintf("%s is not a folder in the tree", workdir))
		}
	}
	return nil
}
