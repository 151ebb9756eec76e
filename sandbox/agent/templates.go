package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// Template disks. The host attaches each template image as a read-only
// virtio disk, in any slot. The agent recognises one by its ext4 volume
// label, TemplateLabelPrefix + a prefix of the name (labels hold 16 bytes),
// mounts it read-only and reads TemplateMarker inside it for the full name
// and version.
const (
	// TemplateLabelPrefix starts the ext4 label of every template disk.
	TemplateLabelPrefix = "stockade-"
	// TemplateMarker is the template's description inside its root:
	// {"name": "...", "version": "..."}.
	TemplateMarker = "etc/stockade-template.json"
)

var validTemplateName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// TemplateMarkerData is the content of TemplateMarker.
type TemplateMarkerData struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type template struct {
	agentproto.TemplateInfo
	dir string
	dev devNum
}

// templates finds and mounts template disks.
type templates struct {
	log      *slog.Logger
	sysBlock string // /sys/block
	devDir   string // /dev
	root     string // mounts go to root/<name>

	mu     sync.Mutex
	byName map[string]template
	seen   map[string]bool // devices looked at (template or not)
}

func newTemplates(log *slog.Logger, sysBlock, devDir, root string) *templates {
	return &templates{log: log, sysBlock: sysBlock, devDir: devDir, root: root,
		byName: map[string]template{}, seen: map[string]bool{}}
}

func (t *templates) get(name string) (template, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tpl, ok := t.byName[name]
	return tpl, ok
}

func (t *templates) list() []agentproto.TemplateInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]agentproto.TemplateInfo, 0, len(t.byName))
	for _, tpl := range t.byName {
		out = append(out, tpl.TemplateInfo)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// scan mounts every template disk not seen before.
func (t *templates) scan() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	entries, err := os.ReadDir(t.sysBlock)
	if err != nil {
		return fmt.Errorf("scan templates: %w", err)
	}
	t.forgetGone()
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "vd") || t.seen[name] {
			continue
		}
		dev := filepath.Join(t.devDir, name)
		label, err := ext4Label(dev)
		if err != nil {
			// Not (yet) readable: look again next time.
			t.log.Debug("template scan", "device", dev, "err", err)
			continue
		}
		t.seen[name] = true
		if !strings.HasPrefix(label, TemplateLabelPrefix) {
			continue
		}
		tpl, err := t.mount(name, dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		t.byName[tpl.Name] = tpl
		t.log.Info("template mounted", "template", tpl.Name, "version", tpl.Version, "device", dev)
	}
	return errors.Join(errs...)
}

// mount mounts dev read-only at a staging point, reads its marker and moves
// the mount to root/<name>.
func (t *templates) mount(name, dev string) (template, error) {
	staging := filepath.Join(t.root, ".dev-"+name)
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return template{}, fmt.Errorf("mount template %s: %w", dev, err)
	}
	// noload: never replay a journal on a disk that must stay untouched.
	if err := unix.Mount(dev, staging, "ext4", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "noload"); err != nil {
		os.Remove(staging)
		return template{}, fmt.Errorf("mount template %s: %w", dev, err)
	}
	undo := func() { unix.Unmount(staging, unix.MNT_DETACH); os.Remove(staging) }
	b, err := os.ReadFile(filepath.Join(staging, TemplateMarker))
	if err != nil {
		undo()
		return template{}, fmt.Errorf("template %s: %w", dev, err)
	}
	var mk TemplateMarkerData
	if err := json.Unmarshal(b, &mk); err != nil || !validTemplateName.MatchString(mk.Name) {
		undo()
		return template{}, fmt.Errorf("template %s: bad marker %q", dev, b)
	}
	if _, dup := t.byName[mk.Name]; dup {
		undo()
		return template{}, fmt.Errorf("template %s on %s: another disk holds it already", mk.Name, dev)
	}
	dir := filepath.Join(t.root, mk.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		undo()
		return template{}, fmt.Errorf("template %s: %w", dev, err)
	}
	if err := unix.Mount(staging, dir, "", unix.MS_MOVE, ""); err != nil {
		undo()
		return template{}, fmt.Errorf("template %s: move mount: %w", dev, err)
	}
	os.Remove(staging)
	num, err := deviceNumber(filepath.Join(t.sysBlock, name, "dev"))
	if err != nil {
		t.log.Warn("template device number", "device", dev, "err", err)
	}
	return template{TemplateInfo: agentproto.TemplateInfo{Name: mk.Name, Device: dev, Version: mk.Version},
		dir: dir, dev: num}, nil
}

// ext4 superblock fields (the superblock starts at byte 1024).
const (
	ext4SuperOffset = 1024
	ext4MagicOffset = 0x38
	ext4LabelOffset = 0x78
	ext4Magic       = 0xEF53
)

// ext4Label reads the volume label of the ext4 file system on dev.
func ext4Label(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sb := make([]byte, 0x88)
	if _, err := f.ReadAt(sb, ext4SuperOffset); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if binary.LittleEndian.Uint16(sb[ext4MagicOffset:]) != ext4Magic {
		return "", nil
	}
	label := sb[ext4LabelOffset : ext4LabelOffset+16]
	if i := bytes.IndexByte(label, 0); i >= 0 {
		label = label[:i]
	}
	return string(label), nil
}

// deviceNumber parses a sysfs "dev" file: "254:16".
func deviceNumber(path string) (devNum, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return devNum{}, err
	}
	var d devNum
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &d.Major, &d.Minor); err != nil {
		return devNum{}, fmt.Errorf("parse %s: %w", path, err)
	}
	return d, nil
}

// release unmounts the template called name and forgets its disk, so that
// the host can unplug it; a disk plugged later in the same slot is looked
// at afresh. The caller checks that no sandbox uses it.
func (t *templates) release(name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	tpl, ok := t.byName[name]
	if !ok {
		return fmt.Errorf("template %q: %w", name, agentproto.ErrNotFound)
	}
	if err := unix.Unmount(tpl.dir, 0); err != nil {
		return fmt.Errorf("release template %s: %w", name, err)
	}
	os.Remove(tpl.dir)
	delete(t.byName, name)
	delete(t.seen, filepath.Base(tpl.Device))
	t.log.Info("template released", "template", name, "device", tpl.Device)
	return nil
}

// forgetGone drops the devices no longer in sysBlock from seen (a disk
// unplugged without a release), so that a new disk in that slot is looked
// at. Called with t.mu held.
func (t *templates) forgetGone() {
	for name := range t.seen {
		if _, err := os.Stat(filepath.Join(t.sysBlock, name)); err != nil {
			delete(t.seen, name)
		}
	}
}

// ReleaseTemplate unmounts the template disk called name so that the host
// can hot-unplug it (agentproto.OpTemplateRelease): ErrConflict while a
// sandbox of this VM runs from it.
func (m *Manager) ReleaseTemplate(name string) error {
	if !validTemplateName.MatchString(name) {
		return fmt.Errorf("template %q: %w", name, agentproto.ErrBadRequest)
	}
	if err := m.evictTemplate(name); err != nil { // prestart.go
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sb := range m.sandboxes {
		if sb.spec.Template == name {
			return fmt.Errorf("release template %s: %w: sandbox %s uses it", name, agentproto.ErrConflict, sb.id)
		}
	}
	return m.templates.release(name)
}
