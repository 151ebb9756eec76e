package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/hypervisor/image/stubinit"
)

// channelModules are loaded, in this order, before the agent opens its
// channel; laterModules load while it already serves. Dependencies (jbd2,
// mbcache, crc16, ...) come before the modules that need them.
// crc32c_generic is the soft dependency of ext4 (the templates) and xfs
// (the scratch disk, with its project quotas) for metadata checksums: the
// kernel would request it, but the guest has no modprobe.
func channelModules() []string {
	return []string{"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_console"}
}

func laterModules() []string {
	return []string{"virtio_blk", "virtio_balloon", "crc32c_generic", "ext4", "xfs", "overlay"}
}

// guestSpec is a resolved guest: where its parts come from and its version.
type guestSpec struct {
	kernelDir, busyboxDir, crunDir string
	libs                           []sharedLib
	inputs                         map[string]string
	version                        string
}

// guestRecord is DataDir/images/guest-<version>/guest.json.
type guestRecord struct {
	Guest     Guest             `json:"guest"`
	Modules   []string          `json:"modules"`
	Checksums map[string]string `json:"checksums"`
	Inputs    map[string]string `json:"inputs"`
}

// templateRecord sits beside each template image: <name>-<version>.ext4.json.
type templateRecord struct {
	Template Template          `json:"template"`
	SHA256   string            `json:"sha256"`
	Inputs   map[string]string `json:"inputs"`
}

// Build makes the guest image and the templates under o.DataDir, reusing
// every part whose inputs did not change, and writes the manifest. Each part
// is built in a temporary folder and renamed into place, so a crash never
// leaves a half image that looks complete. Older versions are left alone.
func Build(ctx context.Context, o Options) (Manifest, error) {
	if o.DataDir == "" {
		return Manifest{}, errors.New("image build: DataDir is required")
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Templates == nil {
		o.Templates = BuiltinTemplates()
	}
	for _, t := range o.Templates {
		if !slices.Contains(BuiltinTemplates(), t) {
			return Manifest{}, fmt.Errorf("image build: template %q: %w", t, ErrUnknownTemplate)
		}
	}
	if err := checkStatic(o.AgentBinary); err != nil {
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	root := imagesDir(dataDir)
	cache := filepath.Join(dataDir, "cache")
	for _, d := range []string{root, filepath.Join(root, "templates"), cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Manifest{}, fmt.Errorf("image build: %w", err)
		}
	}
	unlock, err := lockDir(root)
	if err != nil {
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	defer unlock()
	// Under the lock no other build runs: temporary folders left now are
	// from a build that crashed.
	for _, g := range []string{".guest-*", ".template-*", "../cache/.kernel-*", "../cache/kernel/.kernel-*",
		"../cache/debs/.download-*", "../cache/extract/.extract-*"} {
		stale, _ := filepath.Glob(filepath.Join(root, g))
		for _, d := range stale {
			os.RemoveAll(d)
		}
	}

	b := &builder{o: o, root: root, cache: cache, log: o.Logger,
		p: &progress{w: o.Progress, n: 6 + len(o.Templates)}}
	defer func() {
		if b.base != "" {
			unmountUnder(b.base) // never walk a stray /proc
			os.RemoveAll(b.base)
		}
	}()
	return b.run(ctx)
}

type builder struct {
	o           Options
	root, cache string
	log         *slog.Logger
	p           *progress
	// base is the debootstrapped debian tree the Debian-based templates
	// copy, made by the first that needs it (debianBase).
	base string
}

// dataDir is the (absolute) data dir the images folder is in.
func (b *builder) dataDir() string { return filepath.Dir(b.root) }

func (b *builder) run(ctx context.Context) (Manifest, error) {
	start := time.Now()
	// 1. resolve
	b.p.begin("resolving packages")
	kernel, busybox, crun, err := resolvePackages(ctx)
	if err != nil {
		b.p.end("failed")
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	b.p.end(fmt.Sprintf("%s, %s, %s", kernel, busybox, crun))

	// 2+3. download and extract (a package already extracted needs neither)
	pkgs := []debPackage{kernel, busybox, crun}
	dirs := make([]string, len(pkgs))
	for i, step := range []string{"downloading", "extracting"} {
		b.p.begin("%s packages", step)
		fresh := 0
		for j, pkg := range pkgs {
			dst := filepath.Join(b.cache, "extract", pkg.Name+"_"+pkg.SHA256[:16])
			if _, err := os.Stat(dst); err == nil {
				dirs[j] = dst
				continue
			}
			fresh++
			if i == 0 {
				_, err = fetchDeb(ctx, filepath.Join(b.cache, "debs"), pkg)
			} else {
				var deb string
				if deb, err = fetchDeb(ctx, filepath.Join(b.cache, "debs"), pkg); err == nil {
					dirs[j], err = extractDeb(ctx, filepath.Join(b.cache, "extract"), pkg, deb)
				}
			}
			if err != nil {
				b.p.end("failed")
				return Manifest{}, fmt.Errorf("image build: %w", err)
			}
		}
		b.p.end(cachedOr(fresh, "done"))
	}

	// 4. kernel
	b.p.begin("kernel %s", kernel.Name)
	vmlinuz, modDir, release, err := findKernel(dirs[0])
	if err != nil {
		b.p.end("failed")
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	vmlinux := filepath.Join(b.cache, "kernel", release+"_"+kernel.SHA256[:16], "vmlinux")
	result := "cached"
	if _, err := os.Stat(vmlinux); err != nil {
		if err := b.extractKernel(ctx, vmlinuz, vmlinux); err != nil {
			b.p.end("failed")
			return Manifest{}, fmt.Errorf("image build: %w", err)
		}
		result = "done"
	}
	b.p.end(result)

	// 5. initramfs -> guest
	b.p.begin("guest image (initramfs)")
	g, mods, err := b.guest(ctx, kernel, crun, dirs, vmlinux, modDir, release)
	if err != nil {
		b.p.end("failed")
		return Manifest{}, fmt.Errorf("image build: %w", err)
	}
	b.p.end(g.result)

	// 6.. templates
	templates := map[string]templateRecord{}
	for _, name := range BuiltinTemplates() {
		wanted := slices.Contains(b.o.Templates, name)
		if wanted {
			b.p.begin("template %s", name)
		}
		rec, res, err := b.template(ctx, name, busybox, dirs[1], wanted)
		if err != nil {
			if wanted {
				b.p.end("failed")
			}
			return Manifest{}, fmt.Errorf("image build: %w", err)
		}
		if wanted {
			b.p.end(res)
		}
		if rec != nil {
			templates[name] = *rec
		}
	}

	// last: manifest
	b.p.begin("manifest")
	m := Manifest{
		Guest:     g.rec.Guest,
		Checksums: map[string]string{},
		Inputs:    prefixed("guest.", g.rec.Inputs),
		Files:     map[string]FileStamp{},
		BuiltAt:   time.Now().UTC(),
	}
	for k, v := range g.rec.Checksums {
		m.Checksums[k] = v
	}
	for _, name := range sortedKeys(templates) {
		t := templates[name]
		m.Templates = append(m.Templates, t.Template)
		m.Checksums[t.Template.Path] = t.SHA256
		for k, v := range prefixed("template."+name+".", t.Inputs) {
			m.Inputs[k] = v
		}
	}
	for p := range m.Checksums {
		s, err := stamp(p)
		if err != nil {
			b.p.end("failed")
			return Manifest{}, fmt.Errorf("image build: %w", err)
		}
		m.Files[p] = s
	}
	if err := writeJSON(manifestPath(b.dataDir()), m.onDisk(b.dataDir())); err != nil {
		b.p.end("failed")
		return Manifest{}, fmt.Errorf("image build: write manifest: %w", err)
	}
	b.p.end("done")
	b.log.Info("image built", "guest", m.Guest.Version, "modules", len(mods),
		"templates", len(m.Templates), "took", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// resolvePackages finds the candidate kernel, busybox-static and crun.
func resolvePackages(ctx context.Context) (kernel, busybox, crun debPackage, err error) {
	pkgs, err := aptShow(ctx, "linux-image-amd64", "busybox-static", "crun")
	if err != nil {
		return kernel, busybox, crun, err
	}
	name, err := kernelDependency(pkgs[0])
	if err != nil {
		return kernel, busybox, crun, err
	}
	k, err := aptShow(ctx, name)
	if err != nil {
		return kernel, busybox, crun, err
	}
	return k[0], pkgs[1], pkgs[2], nil
}

func cachedOr(fresh int, done string) string {
	if fresh == 0 {
		return "cached"
	}
	return done
}

func (b *builder) extractKernel(ctx context.Context, vmlinuz, dst string) error {
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".kernel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := extractVmlinux(ctx, vmlinuz, filepath.Join(tmp, "vmlinux")); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

type guestResult struct {
	rec    guestRecord
	result string
}

func (b *builder) guest(ctx context.Context, kernel, crun debPackage, dirs []string,
	vmlinux, modDir, release string) (guestResult, []kmod, error) {
	mods, err := resolveModules(modDir, channelModules(), laterModules())
	if err != nil {
		return guestResult{}, nil, err
	}
	crunBin := filepath.Join(dirs[2], "usr/bin/crun")
	libs, err := crunLibraries(ctx, crunBin)
	if err != nil {
		return guestResult{}, nil, err
	}
	agentSum, err := fileSHA256(b.o.AgentBinary)
	if err != nil {
		return guestResult{}, nil, fmt.Errorf("hash agent: %w", err)
	}
	var modNames []string
	for _, m := range mods {
		name := m.Name
		if m.Later {
			name += "(later)"
		}
		modNames = append(modNames, name)
	}
	inputs := map[string]string{
		"recipe":  recipeVersion,
		"kernel":  kernel.String() + " sha256:" + kernel.SHA256,
		"crun":    crun.String() + " sha256:" + crun.SHA256,
		"agent":   "sha256:" + agentSum,
		"stub":    "sha256:" + stubinit.SourceSHA256(),
		"modules": joinLines(modNames),
		"cmdline": Cmdline,
	}
	for _, l := range libs {
		sum, err := fileSHA256(l.Host)
		if err != nil {
			return guestResult{}, nil, fmt.Errorf("hash %s: %w", l.Host, err)
		}
		inputs["lib:"+l.Path] = "sha256:" + sum
	}
	version := versionOf(inputs)
	dir := filepath.Join(b.root, "guest-"+version)
	recPath := filepath.Join(dir, "guest.json")

	var rec guestRecord
	if err := readJSON(recPath, &rec); err == nil && rec.Guest.Version == version {
		return guestResult{rec: rec.inMemory(b.dataDir()), result: "reused " + version}, mods, nil
	}

	tmp, err := os.MkdirTemp(b.root, ".guest-")
	if err != nil {
		return guestResult{}, nil, err
	}
	defer os.RemoveAll(tmp)
	// QEMU runs as its own user: the folder must be searchable.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return guestResult{}, nil, err
	}
	if err := linkOrCopy(vmlinux, filepath.Join(tmp, "vmlinux")); err != nil {
		return guestResult{}, nil, err
	}
	stub := filepath.Join(tmp, "init-stub")
	if err := stubinit.Build(ctx, stub); err != nil {
		return guestResult{}, nil, err
	}
	size, err := buildInitramfs(initramfsInputs{
		Agent: b.o.AgentBinary, Stub: stub, Crun: crunBin,
		Libs: libs, ModDir: modDir, Release: release, Modules: mods,
	}, filepath.Join(tmp, "initramfs.cpio"))
	os.Remove(stub) // in the initramfs now
	if err != nil {
		return guestResult{}, nil, err
	}
	rec = guestRecord{
		Guest: Guest{
			Version: version, Cmdline: Cmdline, KernelVersion: release,
			Kernel: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, "initramfs.cpio"),
		},
		Modules: modNames, Inputs: inputs, Checksums: map[string]string{},
	}
	for _, f := range []string{"vmlinux", "initramfs.cpio"} {
		sum, err := fileSHA256(filepath.Join(tmp, f))
		if err != nil {
			return guestResult{}, nil, err
		}
		rec.Checksums[filepath.Join(dir, f)] = sum
	}
	if err := writeJSON(filepath.Join(tmp, "guest.json"), rec); err != nil {
		return guestResult{}, nil, err
	}
	os.RemoveAll(dir) // a leftover without guest.json is incomplete
	if err := os.Rename(tmp, dir); err != nil {
		return guestResult{}, nil, err
	}
	b.log.Debug("guest built", "version", version, "initramfs_bytes", size)
	return guestResult{rec: rec, result: fmt.Sprintf("built %s (initramfs %.1f MiB)", version, float64(size)/(1<<20))}, mods, nil
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return copyFileMode(src, dst, 0o644)
}

// templateInputs are what a template's version is computed from.
func (b *builder) templateInputs(ctx context.Context, name string, busybox debPackage) (map[string]string, error) {
	in := map[string]string{"recipe": recipeVersion, "format": FormatExt4}
	switch name {
	case TemplateBusybox:
		in["busybox"] = busybox.String() + " sha256:" + busybox.SHA256
		in["layout"] = busyboxLayout
	case TemplateDebian, TemplateNode, TemplateBuild:
		suite := hostSuite()
		mirror, err := aptMirror(suite)
		if err != nil {
			return nil, err
		}
		out, err := command(ctx, "", "dpkg-query", "-W", "-f=${Version}", "debootstrap")
		if err != nil {
			return nil, fmt.Errorf("debootstrap version: %w", err)
		}
		in["suite"] = suite
		in["mirror"] = mirror
		in["include"] = joinLines(debianIncludes())
		in["debootstrap"] = string(out)
		in["index_date"] = aptIndexDate(mirror, suite)
		if pkgs := derivedPackages(name); pkgs != nil {
			in["packages"] = joinLines(pkgs)
		}
		for p, body := range derivedFiles(name) {
			in["file:"+p] = body
		}
	}
	return in, nil
}

// template builds (when wanted) or finds the current version of template
// name. Not wanted and not built: nil.
func (b *builder) template(ctx context.Context, name string, busybox debPackage, busyboxDir string,
	wanted bool) (*templateRecord, string, error) {
	inputs, err := b.templateInputs(ctx, name, busybox)
	if err != nil {
		if !wanted {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("template %s: %w", name, err)
	}
	version := versionOf(inputs)
	img := filepath.Join(b.root, "templates", name+"-"+version+"."+FormatExt4)
	recPath := img + ".json"
	var rec templateRecord
	if err := readJSON(recPath, &rec); err == nil && rec.Template.Version == version {
		if _, err := os.Stat(img); err == nil {
			rec = rec.inMemory(b.dataDir())
			return &rec, "reused " + version, nil
		}
	}
	if !wanted {
		return nil, "", nil
	}

	tmp, err := os.MkdirTemp(b.root, ".template-"+name+"-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "root")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return nil, "", err
	}
	switch name {
	case TemplateBusybox:
		err = populateBusybox(ctx, tree, filepath.Join(busyboxDir, "bin/busybox"))
	default:
		err = b.fromDebian(ctx, tree, inputs, derivedPackages(name), derivedFiles(name), filepath.Join(b.cache, "apt-"+name+"-"+version+".log"))
	}
	if err != nil {
		return nil, "", fmt.Errorf("template %s: %w", name, err)
	}
	if err := writeTemplateMarker(tree, name, version); err != nil {
		return nil, "", fmt.Errorf("template %s: %w", name, err)
	}
	tmpImg := filepath.Join(tmp, "image")
	if err := mkfsExt4(ctx, tree, tmpImg, templateLabel(name), uuidOf(version)); err != nil {
		return nil, "", fmt.Errorf("template %s: %w", name, err)
	}
	sum, err := fileSHA256(tmpImg)
	if err != nil {
		return nil, "", err
	}
	fi, err := os.Stat(tmpImg)
	if err != nil {
		return nil, "", err
	}
	rec = templateRecord{
		Template: Template{Name: name, Version: version, Path: img, Format: FormatExt4, SizeBytes: fi.Size()},
		SHA256:   sum, Inputs: inputs,
	}
	// The image first, its record second: a record names a complete image.
	if err := os.Rename(tmpImg, img); err != nil {
		return nil, "", err
	}
	if err := writeJSON(recPath, rec); err != nil {
		return nil, "", err
	}
	return &rec, fmt.Sprintf("built %s (%.0f MiB)", version, float64(fi.Size())/(1<<20)), nil
}

// uuidOf makes a stable file-system UUID from a version string.
func uuidOf(version string) string {
	h := bytesSHA256([]byte("stockade-template-" + version))
	return strings.Join([]string{h[0:8], h[8:12], "4" + h[13:16], "8" + h[17:20], h[20:32]}, "-")
}
