package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Registry is what a build needs of the template registry
// (*templates.Service).
type Registry interface {
	// Begin reserves a new version of the tenant's template (name rules,
	// clash with a built-in or another source: ErrConflict; quota on the
	// estimate).
	Begin(ctx context.Context, tenantID string, b templates.Begin) (templates.Version, error)
	// Staging is a scratch folder for the version, removed by Finish/Fail.
	Staging(tenantID, versionID string) (string, error)
	// Finish packs tree into the version's read-only image and marks it ready.
	Finish(ctx context.Context, tenantID, versionID, tree string, d templates.Defaults) (templates.Version, error)
	// Fail marks the version failed and removes all it had.
	Fail(ctx context.Context, tenantID, versionID string, reason error) error
	// VersionByID is the tenant's version (deleted ones too).
	VersionByID(ctx context.Context, tenantID, versionID string) (templates.Version, error)
}

// Setup is a build's setup step: the commands to run over Tree.
type Setup struct {
	Tenant, BuildID string
	// VersionID is the building version the tree becomes.
	VersionID string
	// Tree is the stage tree so far (base, packages, files); the runner
	// applies what the commands changed to it.
	Tree     string
	Commands []string
	User     string
	Workdir  string
	Env      map[string]string
	Log      io.Writer
}

// Runner runs a recipe's setup commands in a builder sandbox of the tenant
// (its egress policy and limits, metered as sandbox time) and brings what
// they changed back into Setup.Tree. The builder sandbox is gone when Run
// returns, whatever happened.
type Runner interface {
	Run(ctx context.Context, actor audit.Actor, s Setup) error
}

// Options configures a Builder.
type Options struct {
	Store    *Store
	Registry Registry
	// Bases are the built-in templates (the image manifest's), read per
	// build.
	Bases func() []image.Template
	// Runner runs setup commands; nil refuses recipes that have any.
	Runner Runner
	// DataDir holds build logs (template-builds/) and the package cache
	// (cache/, shared with the image build).
	DataDir string
	Logger  *slog.Logger
}

// Builder starts recipe builds and runs them in the background.
type Builder struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	cancels map[string]context.CancelFunc // running builds
	wg      sync.WaitGroup
	// one at a time: the machine is small, and apt and mkfs are not.
	slot chan struct{}
}

// New returns a Builder.
func New(o Options) (*Builder, error) {
	if o.Store == nil || o.Registry == nil || o.Bases == nil || o.DataDir == "" {
		return nil, errors.New("recipe builder: Store, Registry, Bases and DataDir are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Builder{o: o, log: o.Logger, cancels: map[string]context.CancelFunc{}, slot: make(chan struct{}, 1)}, nil
}

// Store is the builds store.
func (b *Builder) Store() *Store { return b.o.Store }

// maxRunningPerTenant bounds a tenant's builds in flight.
const maxRunningPerTenant = 2

// Start checks src and starts its build. Every check that can fail on the
// request (the recipe's fields, the base, each package against apt's
// index, the name against the registry) runs before anything is written:
// a failure is a 4xx error and leaves nothing. The same recipe as a
// succeeded build whose version is still ready is not built again: Start
// returns that build and reused true.
func (b *Builder) Start(ctx context.Context, actor audit.Actor, tenant string, src []byte) (Build, bool, error) {
	r, err := Parse(src)
	if err != nil {
		return Build{}, false, err
	}
	base, ok := image.Manifest{Templates: b.o.Bases()}.Template(r.Base)
	if !ok {
		return Build{}, false, errdefs.Invalid("/base", "unknown", fmt.Sprintf("the built-in template %q is not built on this server", r.Base))
	}
	if len(r.Setup) > 0 && b.o.Runner == nil {
		return Build{}, false, errdefs.Invalid("/setup", "unavailable", "this server has no builder sandbox for setup commands")
	}
	pkgs, err := b.resolve(ctx, base.Path, r.Packages)
	if err != nil {
		return Build{}, false, err
	}
	digest := r.Digest()
	if prev, ok, err := b.o.Store.succeeded(ctx, tenant, r.Name, digest); err != nil {
		return Build{}, false, err
	} else if ok {
		v, err := b.o.Registry.VersionByID(ctx, tenant, prev.VersionID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return Build{}, false, err
		}
		if err == nil && v.State == templates.StateReady && v.DeletedAt == nil {
			return prev, true, nil
		}
	}
	if err := b.admit(ctx, tenant); err != nil {
		return Build{}, false, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Build{}, false, fmt.Errorf("build id: %w", err)
	}
	estimate := base.SizeBytes + int64(len(pkgs))*(8<<20)
	v, err := b.o.Registry.Begin(ctx, tenant, templates.Begin{Name: r.Name, Source: templates.SourceRecipe, SourceRef: digest,
		CreatedBy: actor.Name, Actor: actor, Estimate: estimate, Defaults: r.defaults()})
	if err != nil {
		return Build{}, false, err
	}
	versionID := v.ID
	build, err := b.o.Store.create(ctx, actor, Build{ID: id.String(), TenantID: tenant, TemplateName: r.Name,
		VersionID: versionID, RecipeDigest: digest, Recipe: string(src), CreatedBy: actor.Name})
	if err != nil {
		_ = b.o.Registry.Fail(context.WithoutCancel(ctx), tenant, versionID, err)
		return Build{}, false, err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.mu.Lock()
	b.cancels[build.ID] = cancel
	b.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			delete(b.cancels, build.ID)
			b.mu.Unlock()
			cancel()
		}()
		b.run(bctx, actor, build, r, pkgs, base.Path)
	}()
	return build, false, nil
}

func (b *Builder) admit(ctx context.Context, tenant string) error {
	var n int64
	if err := b.o.Store.db.WithContext(ctx).Model(&Build{}).Where("tenant_id = ? AND state = ?", tenant, StateRunning).Count(&n).Error; err != nil {
		return fmt.Errorf("count running builds: %w", err)
	}
	if n >= maxRunningPerTenant {
		return fmt.Errorf("%d builds are running; wait for one to end: %w", n, errdefs.ErrConflict)
	}
	return nil
}

// resolve checks the recipe's packages against the base's installed set
// before anything is written: only the base's dpkg status is read (into a
// temporary folder outside the data dir).
func (b *Builder) resolve(ctx context.Context, baseImage string, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	tmp, err := os.MkdirTemp("", "stockade-recipe-status-")
	if err != nil {
		return nil, fmt.Errorf("resolve packages: %w", err)
	}
	defer os.RemoveAll(tmp)
	status := filepath.Join(tmp, "var/lib/dpkg/status")
	if err := os.MkdirAll(filepath.Dir(status), 0o755); err != nil {
		return nil, fmt.Errorf("resolve packages: %w", err)
	}
	out, err := exec.CommandContext(ctx, "debugfs", "-R", "dump /var/lib/dpkg/status "+status, baseImage).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("resolve packages: read the base's dpkg status: %w: %s", err, lastLines(string(out), 3))
	}
	if fi, err := os.Stat(status); err != nil || fi.Size() == 0 {
		return nil, errdefs.Invalid("/packages", "base", "the base template has no dpkg database: it takes no packages")
	}
	return ResolvePackages(ctx, tmp, names)
}

// run is the build pipeline; any failure fails the version (removing what
// it had) and the build, with the error at the end of the log.
func (b *Builder) run(ctx context.Context, actor audit.Actor, build Build, r Recipe, pkgs []string, baseImage string) {
	log, err := openLog(b.logPath(build.TenantID, build.ID))
	if err != nil {
		b.finish(ctx, actor, build, nil, err)
		return
	}
	defer log.Close()
	select {
	case b.slot <- struct{}{}:
	case <-ctx.Done():
		b.finish(ctx, actor, build, log, ctx.Err())
		return
	}
	defer func() { <-b.slot }()
	b.finish(ctx, actor, build, log, b.steps(ctx, actor, build, r, pkgs, baseImage, log))
}

func (b *Builder) steps(ctx context.Context, actor audit.Actor, build Build, r Recipe, pkgs []string, baseImage string, log *boundedLog) error {
	step := func(n int) {
		fmt.Fprintf(log, "==> step %d of %d: %s\n", n, Steps, StepName(n))
		if err := b.o.Store.setStep(ctx, build.TenantID, build.ID, n, log.Size()); err != nil {
			b.log.Warn("record build step", "build", build.ID, "err", err)
		}
	}
	staging, err := b.o.Registry.Staging(build.TenantID, build.VersionID)
	if err != nil {
		return err
	}
	tree := filepath.Join(staging, "root")

	step(StepBase)
	fmt.Fprintf(log, "base %s\n", r.Base)
	if err := ExtractBase(ctx, baseImage, tree); err != nil {
		return err
	}
	step(StepPackages)
	if len(pkgs) == 0 {
		fmt.Fprintln(log, "no packages")
	} else {
		fmt.Fprintf(log, "%d packages with dependencies: %v\n", len(pkgs), pkgs)
		if err := InstallPackages(ctx, filepath.Join(b.o.DataDir, "cache"), tree, pkgs, log); err != nil {
			return err
		}
	}
	step(StepFiles)
	fmt.Fprintf(log, "%d files\n", len(r.Files))
	if err := WriteFiles(tree, r.Files); err != nil {
		return err
	}
	step(StepSetup)
	if len(r.Setup) == 0 {
		fmt.Fprintln(log, "no setup commands")
	} else {
		err := b.o.Runner.Run(ctx, actor, Setup{Tenant: build.TenantID, BuildID: build.ID, VersionID: build.VersionID, Tree: tree,
			Commands: r.Setup, User: r.User, Workdir: r.Workdir, Env: r.Env, Log: log})
		if err != nil {
			return err
		}
	}
	step(StepPack)
	_, err = b.o.Registry.Finish(ctx, build.TenantID, build.VersionID, tree, r.defaults())
	return err
}

// finish ends the build: a failure fails the version first, so that no
// image, row in building state or staging folder outlives the build.
func (b *Builder) finish(ctx context.Context, actor audit.Actor, build Build, log *boundedLog, err error) {
	ctx = context.WithoutCancel(ctx)
	var size int64
	if err != nil {
		if ferr := b.o.Registry.Fail(ctx, build.TenantID, build.VersionID, err); ferr != nil {
			b.log.Error("fail template version", "build", build.ID, "version", build.VersionID, "err", ferr)
		}
		if log != nil {
			fmt.Fprintf(log, "==> build failed: %v\n", err)
		}
	} else if log != nil {
		fmt.Fprintf(log, "==> build succeeded: template %s version %s\n", build.TemplateName, build.VersionID)
	}
	if log != nil {
		size = log.Size()
	}
	if _, eerr := b.o.Store.end(ctx, actor, build, err, size); eerr != nil {
		b.log.Error("end build", "build", build.ID, "err", eerr)
	}
}

// Recover fails the builds a previous process left running (their
// pipeline died with it) and their versions.
func (b *Builder) Recover(ctx context.Context) error {
	bs, err := b.o.Store.running(ctx)
	if err != nil {
		return err
	}
	for _, build := range bs {
		b.mu.Lock()
		_, mine := b.cancels[build.ID]
		b.mu.Unlock()
		if mine {
			continue
		}
		reason := errors.New("interrupted: the control plane restarted during the build")
		if log, err := openLog(b.logPath(build.TenantID, build.ID)); err == nil {
			b.finish(ctx, audit.Actor{Kind: audit.ActorSystem, Name: "stockade"}, build, log, reason)
			log.Close()
		} else {
			b.finish(ctx, audit.Actor{Kind: audit.ActorSystem, Name: "stockade"}, build, nil, reason)
		}
	}
	return nil
}

// Close cancels the running builds and waits for them to fail.
func (b *Builder) Close() {
	b.mu.Lock()
	for _, c := range b.cancels {
		c()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Wait waits for every build started so far to end (tests, shutdown).
func (b *Builder) Wait() { b.wg.Wait() }
