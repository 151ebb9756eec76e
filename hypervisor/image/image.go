// Package image builds the guest image Stockade boots in every VM (Debian's
// stock kernel as an uncompressed vmlinux, plus an initramfs holding
// stockade-agent as /init, the kernel modules and crun with its libraries)
// and the sandbox templates (read-only root file systems), from
// Debian packages into the data dir, versioned and checksummed.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// recipeVersion changes whenever what Build makes from the same inputs changes.
const recipeVersion = "3"

// Cmdline is the guest kernel command line. Under TCG every trimmed probe
// is boot time saved; panic=-1 turns a dead init into a reboot the host sees.
// Measured under TCG (1 vCPU): acpi=noirq routes PCI interrupts by the MP
// table instead of running the ACPI link methods, ~100 ms per PCI device
// (each virtio device, each template disk, the USB controller); virtio uses
// MSI-X either way. cryptomgr.notests skips the crypto self-tests at boot
// (~170 ms; still run under fips=1).
const Cmdline = "console=ttyS0 quiet panic=-1 mitigations=off tsc=reliable no_timer_check " +
	"8250.nr_uarts=1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd acpi=noirq cryptomgr.notests"

// Template names Build knows.
const (
	TemplateBusybox = "busybox"
	TemplateDebian  = "debian"
	// TemplateNode is debian plus Debian's nodejs and npm.
	TemplateNode = "node"
	// TemplateBuild is debian plus make, gcc, g++ and pkg-config.
	TemplateBuild = "build"
)

// BuiltinTemplates are the templates Build knows, in build order (node and
// build copy debian's tree).
func BuiltinTemplates() []string {
	return []string{TemplateBusybox, TemplateDebian, TemplateNode, TemplateBuild}
}

// FormatExt4 is the template format: `mkfs.ext4 -d` builds it in seconds from
// a folder and the guest reads it without decompressing on an emulated CPU.
// (squashfs would be 3x smaller but takes 30 s to build and costs CPU in
// the guest on every read.)
const FormatExt4 = "ext4"

var (
	// ErrNotBuilt: there is no image in the data dir.
	ErrNotBuilt = errors.New("guest image not built; run `stockade image build`")
	// ErrChanged: an image file differs from what was built.
	ErrChanged = errors.New("image file changed since it was built")
	// ErrUnknownTemplate: a template name Build does not know.
	ErrUnknownTemplate = errors.New("unknown template")
)

// Options configures Build.
type Options struct {
	DataDir string
	// AgentBinary is the static stockade-agent to put in the initramfs as /init.
	AgentBinary string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// Templates to build; nil means all of BuiltinTemplates.
	Templates []string
	Logger    *slog.Logger
}

// Guest is a bootable guest: absolute paths (in the manifest on disk,
// relative to the data dir) and the kernel command line.
type Guest struct {
	Version       string `json:"version"`
	Kernel        string `json:"kernel"`
	Initramfs     string `json:"initramfs"`
	Cmdline       string `json:"cmdline"`
	KernelVersion string `json:"kernel_version"`
}

// Template is a sandbox root file system image.
type Template struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Path      string `json:"path"`
	Format    string `json:"format"`
	SizeBytes int64  `json:"size_bytes"`
}

// FileStamp is what Load compares cheaply: size and modification time.
type FileStamp struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// Manifest describes what is built: DataDir/images/manifest.json.
type Manifest struct {
	Guest     Guest      `json:"guest"`
	Templates []Template `json:"templates"`
	// Checksums maps each file's absolute path (in the manifest on disk,
	// relative to the data dir) to its SHA-256 (hex).
	Checksums map[string]string `json:"checksums"`
	BuiltAt   time.Time         `json:"built_at"`
	// Inputs are what the versions were computed from ("guest.kernel", "template.debian.mirror", ...).
	Inputs map[string]string    `json:"inputs"`
	Files  map[string]FileStamp `json:"files"`
}

// Template returns the template called name.
func (m Manifest) Template(name string) (Template, bool) {
	for _, t := range m.Templates {
		if t.Name == name {
			return t, true
		}
	}
	return Template{}, false
}

func imagesDir(dataDir string) string { return filepath.Join(dataDir, "images") }

func manifestPath(dataDir string) string { return filepath.Join(imagesDir(dataDir), "manifest.json") }

// Load reads what is built and checks that every file is still there with
// the size and time it was built with (Verify hashes them in full). Paths
// come back absolute, wherever the data dir was built (see paths.go).
func Load(dataDir string) (Manifest, error) {
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return Manifest{}, fmt.Errorf("load image: %w", err)
	}
	b, err := os.ReadFile(manifestPath(dataDir))
	if isNotExist(err) {
		return Manifest{}, fmt.Errorf("load image from %s: %w", dataDir, ErrNotBuilt)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("load image: %w", err)
	}
	var disk Manifest
	if err := json.Unmarshal(b, &disk); err != nil {
		return Manifest{}, fmt.Errorf("load image: %w", err)
	}
	m := disk.inMemory(dataDir)
	if m.Guest.Kernel == "" || len(m.Files) == 0 {
		return Manifest{}, fmt.Errorf("load image: manifest without a guest: %w", ErrNotBuilt)
	}
	for path, want := range m.Files {
		got, err := stamp(path)
		if err != nil {
			return Manifest{}, fmt.Errorf("load image: %s: %w (%w)", path, ErrChanged, err)
		}
		if got.Size != want.Size || !got.ModTime.Equal(want.ModTime) {
			return Manifest{}, fmt.Errorf("load image: %s: %w", path, ErrChanged)
		}
	}
	return m, nil
}

// Verify hashes every file of m and compares with its recorded checksum.
func Verify(m Manifest) error {
	paths := make([]string, 0, len(m.Checksums))
	for p := range m.Checksums {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		got, err := fileSHA256(p)
		if err != nil {
			return fmt.Errorf("verify image: %s: %w (%w)", p, ErrChanged, err)
		}
		if got != m.Checksums[p] {
			return fmt.Errorf("verify image: %s has sha256 %s, built as %s: %w", p, got, m.Checksums[p], ErrChanged)
		}
	}
	return nil
}

func stamp(path string) (FileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileStamp{}, err
	}
	return FileStamp{Size: fi.Size(), ModTime: fi.ModTime().UTC()}, nil
}

// versionOf hashes inputs (sorted key=value lines) into a short version.
func versionOf(inputs map[string]string) string {
	keys := make([]string, 0, len(inputs))
	for k := range inputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, inputs[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// lockDir takes an exclusive lock so two builds never interleave.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

// progress writes "[i/n] what ... done 1.2s" lines.
type progress struct {
	w     io.Writer
	i, n  int
	start time.Time
}

func (p *progress) begin(format string, args ...any) {
	p.i++
	p.start = time.Now()
	fmt.Fprintf(p.w, "[%d/%d] %s ... ", p.i, p.n, fmt.Sprintf(format, args...))
}

func (p *progress) end(result string) {
	fmt.Fprintf(p.w, "%s %.1fs\n", result, time.Since(p.start).Seconds())
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func prefixed(prefix string, m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[prefix+k] = v
	}
	return out
}

func joinLines(lines []string) string { return strings.Join(lines, ",") }

// ctxDone is a cheap cancellation check between steps.
func ctxDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("image build: %w", err)
	}
	return nil
}
