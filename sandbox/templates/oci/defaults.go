package oci

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SandboxUser is the user sandboxes run as; an image's root user maps to it.
const SandboxUser = "sandbox"

// Bounds of the defaults an image gives (sandbox/templates checks the same).
const (
	maxEnvVars  = 64
	maxEnvBytes = 64 << 10
)

// Defaults are what the image's config gives a template: its Env, its
// WorkingDir, and its User unless that is root (or names uid 0 in the
// image's /etc/passwd), which becomes the sandbox user: sandboxes never run
// as root.
func (im *Image) Defaults(tree string) (env map[string]string, user, workdir string, err error) {
	c := im.Config.Config
	env = map[string]string{}
	n := 0
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		env[k] = v
		n += len(k) + len(v)
	}
	if len(env) > maxEnvVars || n > maxEnvBytes {
		return nil, "", "", refusal("config_env", "the image config sets %d variables (%d bytes); a template takes at most %d (%d bytes)", len(env), n, maxEnvVars, maxEnvBytes)
	}
	if wd := strings.TrimSpace(c.WorkingDir); wd != "" {
		rel, err := cleanName(strings.TrimPrefix(wd, "/"))
		if err != nil {
			return nil, "", "", err
		}
		workdir = "/" + rel
	}
	return env, mapUser(tree, c.User), workdir, nil
}

// mapUser is the image's user ("name", "uid", "name:group") as a template
// default: root, uid 0, or a name whose uid is 0 become the sandbox user.
func mapUser(tree, u string) string {
	name, _, _ := strings.Cut(strings.TrimSpace(u), ":")
	if name == "" || name == "root" || name == "0" {
		return SandboxUser
	}
	if uid, err := strconv.Atoi(name); err == nil {
		if uid <= 0 {
			return SandboxUser
		}
		return name
	}
	if uid, ok := passwdUID(tree, name); !ok || uid == 0 {
		// Not a user of the image (nothing would run as it) or root by
		// another name.
		return SandboxUser
	}
	return name
}

// passwdUID reads name's uid from tree's /etc/passwd (a regular file:
// Flatten checked it).
func passwdUID(tree, name string) (int, bool) {
	p := filepath.Join(tree, "etc", "passwd")
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) >= 3 && fs[0] == name {
			uid, err := strconv.Atoi(fs[2])
			return uid, err == nil
		}
	}
	return 0, false
}
