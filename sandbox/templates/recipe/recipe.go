// Package recipe builds tenant templates from a recipe (issue 18, item 2):
// a versioned YAML or JSON document naming a built-in base, Debian
// packages, files and setup commands. Packages are fetched and unpacked on
// the host (apt-get download + dpkg -x, never in the guest); setup commands
// run in a builder sandbox of the tenant, under its egress policy; the
// result is packed into a read-only template version by sandbox/templates.
package recipe

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stockade-dev/stockade/sandbox/templates"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// APIVersion is the one recipe version this package reads.
const APIVersion = "stockade.dev/template/v1"

// Bounds of a recipe.
const (
	MaxSourceBytes   = 256 << 10
	MaxPackages      = 200
	MaxFiles         = 200
	MaxFileBytes     = 64 << 10
	MaxSetup         = 50
	MaxCommandBytes  = 8 << 10
	MaxEnv           = 64
	MaxEnvValueBytes = 4 << 10
)

// Built-in bases a recipe may name. busybox has no dpkg: it takes files and
// setup commands but no packages.
const (
	BaseBusybox = "busybox"
	BaseDebian  = "debian"
	BaseNode    = "node"
	BaseBuild   = "build"
)

// Recipe is a parsed, checked recipe document.
type Recipe struct {
	APIVersion string            `json:"apiVersion"`
	Name       string            `json:"name"`
	Base       string            `json:"base"`
	Packages   []string          `json:"packages,omitempty"`
	Files      map[string]File   `json:"files,omitempty"`
	Setup      []string          `json:"setup,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	User       string            `json:"user,omitempty"`
	Workdir    string            `json:"workdir,omitempty"`
}

// File is one file a recipe adds: its content and octal mode ("0644" when
// empty).
type File struct {
	Content string `json:"content"`
	Mode    string `json:"mode,omitempty"`
}

// Perm is f's mode bits.
func (f File) Perm() uint32 {
	if f.Mode == "" {
		return 0o644
	}
	m, _ := strconv.ParseUint(f.Mode, 8, 32)
	return uint32(m)
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	packageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,62}$`)
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	userRE    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	modeRE    = regexp.MustCompile(`^0?[0-7]{3}$`)
)

// topFields and fileFields are the keys a recipe may have; anything else is
// refused, so a misspelt field never silently does nothing.
var (
	topFields  = []string{"apiVersion", "name", "base", "packages", "files", "setup", "env", "user", "workdir"}
	fileFields = []string{"content", "mode"}
)

// Parse reads a recipe (YAML, or JSON which is YAML) and checks every
// field. A failure names every failing field at once: errors.Join of
// *errdefs.FieldError whose Field is a JSON pointer ("/packages/1").
func Parse(src []byte) (Recipe, error) {
	if len(src) > MaxSourceBytes {
		return Recipe{}, errdefs.Invalid("/", "size", fmt.Sprintf("the recipe must be at most %d bytes", MaxSourceBytes))
	}
	if len(bytes.TrimSpace(src)) == 0 {
		return Recipe{}, errdefs.Invalid("/", "required", "the recipe is empty")
	}
	var doc any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return Recipe{}, errdefs.Invalid("/", "syntax", "not valid YAML or JSON: "+strings.TrimPrefix(err.Error(), "yaml: "))
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return Recipe{}, errdefs.Invalid("/", "type", "the recipe must be a mapping of fields")
	}
	var errs []error
	add := func(field, rule, detail string) { errs = append(errs, errdefs.Invalid(field, rule, detail)) }
	unknown(top, "", topFields, add)
	var r Recipe
	r.APIVersion = str(top, "apiVersion", "/apiVersion", add)
	r.Name = str(top, "name", "/name", add)
	r.Base = str(top, "base", "/base", add)
	r.User = str(top, "user", "/user", add)
	r.Workdir = str(top, "workdir", "/workdir", add)
	r.Packages = strList(top, "packages", add)
	r.Setup = strList(top, "setup", add)
	if v, ok := top["env"]; ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			add("/env", "type", "must be a mapping of names to values")
		} else {
			r.Env = map[string]string{}
			for k, val := range m {
				s, ok := scalar(val)
				if !ok {
					add("/env/"+pointerEscape(k), "type", "must be a string")
					continue
				}
				r.Env[k] = s
			}
		}
	}
	if v, ok := top["files"]; ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			add("/files", "type", "must be a mapping of paths to {content, mode}")
		} else {
			r.Files = map[string]File{}
			for p, fv := range m {
				ptr := "/files/" + pointerEscape(p)
				fm, ok := fv.(map[string]any)
				if !ok {
					add(ptr, "type", "must be a mapping with content and mode")
					continue
				}
				unknown(fm, ptr, fileFields, add)
				if _, ok := fm["content"]; !ok {
					add(ptr+"/content", "required", "required")
				}
				r.Files[p] = File{Content: str(fm, "content", ptr+"/content", add), Mode: modeStr(fm, ptr+"/mode", add)}
			}
		}
	}
	errs = append(errs, r.check()...)
	if len(errs) > 0 {
		sortFieldErrors(errs)
		return Recipe{}, errors.Join(errs...)
	}
	return r, nil
}

// check applies the rules of each field to a decoded recipe.
func (r Recipe) check() []error {
	var errs []error
	add := func(field, rule, detail string) { errs = append(errs, errdefs.Invalid(field, rule, detail)) }
	switch {
	case r.APIVersion == "":
		add("/apiVersion", "required", "required ("+APIVersion+")")
	case r.APIVersion != APIVersion:
		add("/apiVersion", "unsupported", fmt.Sprintf("%q is not a recipe version this server reads (%s)", r.APIVersion, APIVersion))
	}
	switch {
	case r.Name == "":
		add("/name", "required", "required")
	case !nameRE.MatchString(r.Name):
		add("/name", "format", "must be 1-32 lowercase letters, digits, '-' or '_', starting with a letter or digit")
	}
	switch r.Base {
	case "":
		add("/base", "required", "required (debian, node or build)")
	case BaseDebian, BaseNode, BaseBuild:
	case BaseBusybox:
		if len(r.Packages) > 0 {
			add("/packages", "base", "busybox has no package manager: use base debian, node or build for packages")
		}
	default:
		add("/base", "unknown", fmt.Sprintf("%q is not a built-in template (debian, node, build)", r.Base))
	}
	if len(r.Packages) > MaxPackages {
		add("/packages", "size", fmt.Sprintf("at most %d packages", MaxPackages))
	}
	seen := map[string]bool{}
	for i, p := range r.Packages {
		ptr := fmt.Sprintf("/packages/%d", i)
		switch {
		case !packageRE.MatchString(p):
			add(ptr, "format", fmt.Sprintf("%q is not a Debian package name", p))
		case seen[p]:
			add(ptr, "duplicate", fmt.Sprintf("%q is listed twice", p))
		}
		seen[p] = true
	}
	if len(r.Files) > MaxFiles {
		add("/files", "size", fmt.Sprintf("at most %d files", MaxFiles))
	}
	for p, f := range r.Files {
		ptr := "/files/" + pointerEscape(p)
		if detail := checkPath(p); detail != "" {
			add(ptr, "path", detail)
		}
		if len(f.Content) > MaxFileBytes {
			add(ptr+"/content", "size", fmt.Sprintf("at most %d bytes", MaxFileBytes))
		}
		if f.Mode != "" && !modeRE.MatchString(f.Mode) {
			add(ptr+"/mode", "format", "must be an octal mode such as \"0644\" or \"0755\"")
		}
	}
	if len(r.Setup) > MaxSetup {
		add("/setup", "size", fmt.Sprintf("at most %d commands", MaxSetup))
	}
	for i, c := range r.Setup {
		ptr := fmt.Sprintf("/setup/%d", i)
		switch {
		case strings.TrimSpace(c) == "":
			add(ptr, "required", "an empty command")
		case len(c) > MaxCommandBytes:
			add(ptr, "size", fmt.Sprintf("at most %d bytes", MaxCommandBytes))
		case strings.ContainsRune(c, 0):
			add(ptr, "format", "contains a NUL byte")
		}
	}
	if len(r.Env) > MaxEnv {
		add("/env", "size", fmt.Sprintf("at most %d variables", MaxEnv))
	}
	for k, v := range r.Env {
		ptr := "/env/" + pointerEscape(k)
		switch {
		case !envKeyRE.MatchString(k):
			add(ptr, "format", "must be a letter or '_' then letters, digits or '_'")
		case len(v) > MaxEnvValueBytes:
			add(ptr, "size", fmt.Sprintf("at most %d bytes", MaxEnvValueBytes))
		case strings.ContainsRune(v, 0):
			add(ptr, "format", "contains a NUL byte")
		}
	}
	switch {
	case r.User == "":
	case r.User == "root":
		add("/user", "root", "sandboxes never run as root; leave it empty for the sandbox user")
	case !userRE.MatchString(r.User):
		add("/user", "format", "must be a user name (lowercase letters, digits, '-' or '_')")
	}
	if r.Workdir != "" {
		if detail := checkPath(r.Workdir); detail != "" && r.Workdir != "/" {
			add("/workdir", "path", detail)
		}
	}
	return errs
}

// checkPath says what is wrong with p as a path inside the template's root
// ("" when nothing is).
func checkPath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return "must be an absolute path inside the template"
	case len(p) > 1024:
		return "at most 1024 bytes"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte"
	case path.Clean(p) != p || p == "/":
		return "must be a clean path to a file (no '..', '.', '//' or trailing '/')"
	}
	for _, sys := range []string{"/proc", "/sys", "/dev", "/etc/stockade-template.json"} {
		if p == sys || strings.HasPrefix(p, sys+"/") {
			return sys + " is managed by the platform"
		}
	}
	return ""
}

// defaults are the env, user and workdir the recipe gives its sandboxes.
func (r Recipe) defaults() templates.Defaults {
	return templates.Defaults{Env: r.Env, User: r.User, Workdir: r.Workdir}
}

// Digest is the recipe's identity: the SHA-256 of its canonical JSON (maps
// sorted by key, no insignificant whitespace), "sha256:<hex>". The same
// recipe in YAML or JSON, with fields in any order, has the same digest.
func (r Recipe) Digest() string {
	b, _ := json.Marshal(r) // a Recipe is strings, slices and maps of strings: it always encodes
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// Example is the recipe the page prefills and the README shows.
const Example = `apiVersion: stockade.dev/template/v1
name: jq-tools
base: debian
packages:
  - jq
  - tree
files:
  /etc/motd:
    content: "built from a recipe\n"
    mode: "0644"
env:
  EDITOR: nano
workdir: /opt/tools
setup:
  - jq --version > jq-version.txt
`

func unknown(m map[string]any, prefix string, known []string, add func(field, rule, detail string)) {
	for k := range m {
		ok := false
		for _, want := range known {
			if k == want {
				ok = true
			}
		}
		if !ok {
			add(prefix+"/"+pointerEscape(k), "unknown", fmt.Sprintf("%q is not a recipe field here (%s)", k, strings.Join(known, ", ")))
		}
	}
}

func str(m map[string]any, key, ptr string, add func(field, rule, detail string)) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := scalar(v)
	if !ok {
		add(ptr, "type", "must be a string")
	}
	return s
}

// scalar is v as text when it is a string (or a number or boolean YAML
// read as one).
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

// modeStr reads a file mode: "0755" as a string, or 0755 / 493 as YAML read
// it (an integer YAML 1.1 octal literal arrives as its value).
func modeStr(m map[string]any, ptr string, add func(field, rule, detail string)) string {
	v, ok := m["mode"]
	if !ok || v == nil {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case int:
		if x >= 0 && x <= 0o777 {
			return fmt.Sprintf("%04o", x)
		}
		return strconv.Itoa(x)
	}
	add(ptr, "type", "must be an octal mode such as \"0644\"")
	return ""
}

func strList(m map[string]any, key string, add func(field, rule, detail string)) []string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		add("/"+key, "type", "must be a list of strings")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			add(fmt.Sprintf("/%s/%d", key, i), "type", "must be a string")
		}
		out = append(out, s)
	}
	return out
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func sortFieldErrors(errs []error) {
	field := func(e error) string {
		var fe *errdefs.FieldError
		if errors.As(e, &fe) {
			return fe.Field
		}
		return ""
	}
	sort.SliceStable(errs, func(i, j int) bool { return field(errs[i]) < field(errs[j]) })
}
