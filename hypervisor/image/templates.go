package image

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sandbox user inside every template: the non-root user commands run as.
const (
	sandboxUser = "sandbox"
	sandboxUID  = 1000
)

// The guest agent finds template disks by their ext4 label and reads their
// name and version from a marker file inside: templateLabelPrefix and
// templateMarker must match sandbox/agent's TemplateLabelPrefix and
// TemplateMarker (this package imports nothing of ours).
const (
	templateLabelPrefix = "stockade-"
	templateMarker      = "etc/stockade-template.json"
)

// templateLabel is the ext4 label of a template disk: the prefix and as much
// of the name as the label's 16 bytes hold.
func templateLabel(name string) string {
	l := templateLabelPrefix + name
	if len(l) > 16 {
		l = l[:16]
	}
	return l
}

// writeTemplateMarker writes the template's name and version into its tree.
func writeTemplateMarker(dir, name, version string) error {
	b, err := json.Marshal(struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}{name, version})
	if err != nil {
		return err
	}
	p := filepath.Join(dir, templateMarker)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("template marker: %w", err)
	}
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("template marker: %w", err)
	}
	return nil
}

// debianIncludes are the packages the Debian template adds to minbase.
func debianIncludes() []string {
	return []string{"bash", "coreutils", "git", "curl", "ca-certificates", "python3"}
}

// busyboxLayout changes whenever populateBusybox lays out a different tree
// (2: /etc/shadow), so that only this template is built again.
const busyboxLayout = "2"

// populateBusybox lays out the tiny test template in dir: a static busybox
// with every applet linked, a sandbox user (and root's /etc/shadow), /tmp
// and /workspace.
func populateBusybox(ctx context.Context, dir, busybox string) error {
	if err := copyFileMode(busybox, filepath.Join(dir, "bin/busybox"), 0o755); err != nil {
		return err
	}
	out, err := command(ctx, "", busybox, "--list-full")
	if err != nil {
		return fmt.Errorf("busybox template: %w", err)
	}
	for _, app := range strings.Fields(string(out)) {
		if app == "bin/busybox" || strings.Contains(app, "..") {
			continue
		}
		p := filepath.Join(dir, app)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("busybox template: %w", err)
		}
		if err := os.Symlink("/bin/busybox", p); err != nil {
			return fmt.Errorf("busybox template: %w", err)
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n" +
			fmt.Sprintf("%s:x:%d:%d:sandbox:/home/%s:/bin/sh\n", sandboxUser, sandboxUID, sandboxUID, sandboxUser) +
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group": "root:x:0:\n" + fmt.Sprintf("%s:x:%d:\n", sandboxUser, sandboxUID) + "nogroup:x:65534:\n",
		"etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
	}
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		return fmt.Errorf("busybox template: %w", err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("busybox template: %w", err)
		}
	}
	// Root's alone, as on any system: no password works, but the sandbox
	// user must not read it (the compliance probe and the files API's
	// tests try).
	shadow := "root:*:19000:0:99999:7:::\n" + sandboxUser + ":!:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n"
	if err := os.WriteFile(filepath.Join(dir, "etc/shadow"), []byte(shadow), 0o600); err != nil {
		return fmt.Errorf("busybox template: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev", "run", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("busybox template: %w", err)
		}
	}
	return sandboxDirs(dir)
}

// sandboxDirs makes /tmp, /workspace and the sandbox user's home.
func sandboxDirs(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("template dirs: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|fs.ModeSticky); err != nil {
		return fmt.Errorf("template dirs: %w", err)
	}
	for _, d := range []string{"workspace", "home/" + sandboxUser} {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("template dirs: %w", err)
		}
		if err := os.Chown(p, sandboxUID, sandboxUID); err != nil {
			return fmt.Errorf("template dirs: %w", err)
		}
	}
	return nil
}

// debootstrapDebian runs debootstrap into dir (its downloads kept in
// cacheDir) and adds the sandbox user. log receives debootstrap's chatter.
func debootstrapDebian(ctx context.Context, dir, suite, mirror, cacheDir, logPath string) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("debian template: %w", err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--cache-dir="+cacheDir,
		"--include="+strings.Join(debianIncludes(), ","), "--components=main", suite, dir, mirror)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	// debootstrap mounts /proc (and more) in the target while it works; an
	// interrupted one leaves them there.
	if uerr := unmountUnder(dir); err == nil {
		err = uerr
	}
	if err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("debootstrap %s %s: %w: %s", suite, mirror, err, tail(string(b), 800))
	}
	if _, err := command(ctx, "", "chroot", dir, "useradd", "--create-home", "--uid", fmt.Sprint(sandboxUID),
		"--user-group", "--shell", "/bin/bash", sandboxUser); err != nil {
		return fmt.Errorf("debian template: add user: %w", err)
	}
	return nil
}

// cleanApt drops apt's caches, indexes and logs from a Debian tree.
func cleanApt(dir string) error {
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*", "var/log/*.log", "var/log/apt/*"} {
		matches, _ := filepath.Glob(filepath.Join(dir, g))
		for _, m := range matches {
			if fi, err := os.Lstat(m); err == nil && fi.Mode().IsRegular() {
				if err := os.Remove(m); err != nil {
					return fmt.Errorf("debian template: clean: %w", err)
				}
			}
		}
	}
	return nil
}

// mkfsExt4 makes an ext4 image of dir at dst, sized to its contents. No
// journal: templates are attached read-only.
func mkfsExt4(ctx context.Context, dir, dst, label, uuid string) error {
	var bytes, inodes int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		info, err := d.Info()
		if err != nil {
			return err
		}
		bytes += (info.Size() + 4095) &^ 4095
		return nil
	})
	if err != nil {
		return fmt.Errorf("size %s: %w", dir, err)
	}
	const mib = 1 << 20
	size := (bytes*5/4 + inodes*256 + 16*mib + mib - 1) / mib * mib
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("mkfs %s: %w", dst, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("mkfs %s: %w", dst, err)
	}
	f.Close()
	_, err = command(ctx, "", "mkfs.ext4", "-q", "-F", "-b", "4096", "-L", label, "-U", uuid, "-m", "0",
		"-N", fmt.Sprint(inodes*5/4+1024), "-O", "^has_journal",
		"-E", "lazy_itable_init=0,root_owner=0:0", "-d", dir, dst)
	if err != nil {
		return fmt.Errorf("mkfs %s: %w", dst, err)
	}
	return nil
}

// aptMirror finds the Debian mirror apt itself uses for suite, so debootstrap
// goes where this machine is allowed to go.
func aptMirror(suite string) (string, error) {
	var files []string
	d822, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, d822...)
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(files, "/etc/apt/sources.list")
	files = append(files, lists...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uri string
		if strings.HasSuffix(f, ".sources") {
			uri = mirrorDeb822(string(b), suite)
		} else {
			uri = mirrorOneLine(string(b), suite)
		}
		if uri != "" {
			return strings.TrimSuffix(uri, "/"), nil
		}
	}
	return "", fmt.Errorf("find apt mirror: no deb source for %s main in /etc/apt", suite)
}

func mirrorDeb822(s, suite string) string {
	for _, stanza := range strings.Split(s, "\n\n") {
		f := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(stanza))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") {
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
				f[strings.ToLower(k)] = strings.TrimSpace(v)
			}
		}
		if f["enabled"] == "no" || !hasWord(f["types"], "deb") || !hasWord(f["suites"], suite) || !hasWord(f["components"], "main") {
			continue
		}
		if uris := strings.Fields(f["uris"]); len(uris) > 0 {
			return uris[0]
		}
	}
	return ""
}

func mirrorOneLine(s, suite string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "deb ") {
			continue
		}
		f := strings.Fields(line)[1:]
		if len(f) > 0 && strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 3 && f[1] == suite && hasWord(strings.Join(f[2:], " "), "main") {
			return f[0]
		}
	}
	return ""
}

func hasWord(s, w string) bool {
	for _, x := range strings.Fields(s) {
		if x == w {
			return true
		}
	}
	return false
}

// hostSuite is this host's Debian codename; the guest's packages come from it.
func hostSuite() string {
	b, err := os.ReadFile("/etc/os-release")
	if err == nil {
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VERSION_CODENAME="); ok && v != "" {
				return strings.Trim(v, `"`)
			}
		}
	}
	return "bookworm"
}

// aptIndexDate is the Date: of the host's cached Release file for
// mirror/suite, so the Debian template follows `apt-get update`.
func aptIndexDate(mirror, suite string) string {
	host := strings.TrimPrefix(strings.TrimPrefix(mirror, "http://"), "https://")
	prefix := strings.ReplaceAll(host, "/", "_") + "_dists_" + suite + "_"
	for _, name := range []string{"InRelease", "Release"} {
		b, err := os.ReadFile(filepath.Join("/var/lib/apt/lists", prefix+name))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Date:"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}

func copyFileMode(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}
