package app_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/stockade-dev/stockade"

// listed is what `go list -json` says of one package: its direct imports
// (test files' imports are not among them) and its files.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
}

// ours is the module-relative path of an import of this module ("" is the
// module root), ok false for anything else.
func ours(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// under reports whether rel is dir or inside it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// importRule is one line of ARCHITECTURE.md's dependency direction.
type importRule struct {
	name string
	// applies selects the importing packages (module-relative).
	applies func(pkg string) bool
	// allowed says whether pkg may import imp (both module-relative).
	allowed func(pkg, imp string) bool
}

var importRules = []importRule{
	{
		// web serves: it may import the handlers it routes to, the views of
		// its error pages, the sessions, tokens and roles it checks
		// (tenants, tenants/audit), the error vocabulary and its own
		// sub-packages; no sandbox, hypervisor or other tenant domain.
		name:    "web imports only what it serves",
		applies: func(p string) bool { return p == "web" },
		allowed: func(_, imp string) bool {
			switch imp {
			case "handlers", "handlers/api", "views", "static", "tenants", "tenants/audit", "tenants/errdefs":
				return true
			}
			return under(imp, "web")
		},
	},
	{
		name:    "handlers import no web package",
		applies: func(p string) bool { return under(p, "handlers") },
		allowed: func(_, imp string) bool { return !under(imp, "web") },
	},
	{
		// The CLI talks to the server over HTTP with the shared wire types;
		// only the composition root builds handlers.
		name:    "the CLI imports no handlers package but the wire types",
		applies: func(p string) bool { return p == "cmd/stockade" },
		allowed: func(_, imp string) bool { return !under(imp, "handlers") || under(imp, "handlers/api") },
	},
	{
		// The composition root imports everything, so nothing else may
		// import it but the CLI and test harnesses.
		name:    "only the CLI and test harnesses import the composition root",
		applies: func(string) bool { return true },
		allowed: func(p, imp string) bool {
			if !under(imp, "cmd/stockade/app") {
				return true
			}
			return p == "cmd/stockade" || strings.HasSuffix(filepath.Base(p), "test")
		},
	},
	{
		name:    "views import nothing of ours",
		applies: func(p string) bool { return under(p, "views") },
		allowed: func(string, string) bool { return false },
	},
	{
		name:    "hypervisor imports nothing of ours outside hypervisor",
		applies: func(p string) bool { return under(p, "hypervisor") },
		allowed: func(_, imp string) bool { return under(imp, "hypervisor") },
	},
	{
		// The compliance probe runs from sandbox/ and stores results that
		// tenants/ reads.
		name:    "tenants never import sandbox",
		applies: func(p string) bool { return under(p, "tenants") },
		allowed: func(_, imp string) bool { return !under(imp, "sandbox") },
	},
	{
		// The guest side is built static into the VM: wire types only.
		name:    "the guest agent imports only the wire types",
		applies: func(p string) bool { return under(p, "sandbox/agent") },
		allowed: func(_, imp string) bool {
			return under(imp, "sandbox/agent") || under(imp, "sandbox/agentproto") || imp == "tenants/errdefs"
		},
	},
	{
		// Dependency direction cmd -> web -> handlers -> {sandbox, tenants}
		// -> hypervisor: the domain never reaches back up.
		name: "the domain imports no web, handlers or cmd package",
		applies: func(p string) bool {
			return under(p, "sandbox") || under(p, "tenants") || under(p, "hypervisor")
		},
		allowed: func(p, imp string) bool {
			return !under(imp, "web") && !under(imp, "handlers") && !under(imp, "cmd")
		},
	},
}

// TestImportDirection asserts ARCHITECTURE.md's dependency direction on
// the direct imports of every package of the module (go list), naming each
// offending file.
func TestImportDirection(t *testing.T) {
	pkgs := goList(t)
	if len(pkgs) < 20 {
		t.Fatalf("Got(go list ./...) = %d packages; want the whole module", len(pkgs))
	}
	for _, r := range importRules {
		t.Run(r.name, func(t *testing.T) {
			var bad []string
			for _, p := range pkgs {
				rel, ok := ours(p.ImportPath)
				if !ok || !r.applies(rel) {
					continue
				}
				for _, imp := range p.Imports {
					irel, ok := ours(imp)
					if !ok || r.allowed(rel, irel) {
						continue
					}
					for _, f := range importingFiles(t, p, imp) {
						bad = append(bad, f+" -> "+irel)
					}
				}
			}
			sort.Strings(bad)
			for _, v := range bad {
				t.Errorf("Got(import) %s; want none: %s", v, r.name)
			}
		})
	}
}

// TestImportRulesCatch checks each rule on made-up imports: a rule that
// allowed everything would pass TestImportDirection too.
func TestImportRulesCatch(t *testing.T) {
	tests := []struct {
		rule, pkg, imp string
		allowed        bool
	}{
		{"web imports only what it serves", "web", "sandbox", false},
		{"web imports only what it serves", "web", "hypervisor", false},
		{"web imports only what it serves", "web", "tenants/policy", false},
		{"web imports only what it serves", "web", "handlers", true},
		{"web imports only what it serves", "web", "web/authn", true},
		{"handlers import no web package", "handlers", "web/authn", false},
		{"handlers import no web package", "handlers/api", "web", false},
		{"handlers import no web package", "handlers", "sandbox", true},
		{"the CLI imports no handlers package but the wire types", "cmd/stockade", "handlers", false},
		{"the CLI imports no handlers package but the wire types", "cmd/stockade", "handlers/api", true},
		{"only the CLI and test harnesses import the composition root", "web", "cmd/stockade/app", false},
		{"only the CLI and test harnesses import the composition root", "web/webtest", "cmd/stockade/app", true},
		{"views import nothing of ours", "views", "tenants", false},
		{"hypervisor imports nothing of ours outside hypervisor", "hypervisor/image", "sandbox/agentproto", false},
		{"hypervisor imports nothing of ours outside hypervisor", "hypervisor/hypervisortest", "hypervisor", true},
		{"tenants never import sandbox", "tenants/compliance", "sandbox/probe", false},
		{"the guest agent imports only the wire types", "sandbox/agent", "sandbox", false},
		{"the guest agent imports only the wire types", "sandbox/agent/init", "sandbox/agentproto", true},
		{"the domain imports no web, handlers or cmd package", "sandbox/runs", "web/hooks", false},
		{"the domain imports no web, handlers or cmd package", "tenants", "handlers", false},
	}
	for _, tc := range tests {
		var r *importRule
		for i := range importRules {
			if importRules[i].name == tc.rule {
				r = &importRules[i]
			}
		}
		if r == nil {
			t.Fatalf("no rule %q", tc.rule)
		}
		if !r.applies(tc.pkg) {
			t.Errorf("Got(%q applies to %s) = false; want true", tc.rule, tc.pkg)
			continue
		}
		if got := r.allowed(tc.pkg, tc.imp); got != tc.allowed {
			t.Errorf("Got(%q allows %s -> %s) = %v; want %v", tc.rule, tc.pkg, tc.imp, got, tc.allowed)
		}
	}
}

// goList lists every package of the module with its direct imports.
func goList(t *testing.T) []listed {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Fatalf("the go command: %v", err)
		}
	}
	root := moduleRoot(t, goBin)
	cmd := exec.Command(goBin, "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v: %s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func moduleRoot(t *testing.T, goBin string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q, %v; want this module's go.mod", gomod, err)
	}
	return filepath.Dir(gomod)
}

// importingFiles names the files of p (module-relative) that import imp.
func importingFiles(t *testing.T, p listed, imp string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
		path := filepath.Join(p.Dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		for _, s := range f.Imports {
			if v, err := strconv.Unquote(s.Path.Value); err == nil && v == imp {
				rel, _ := ours(p.ImportPath)
				out = append(out, filepath.ToSlash(filepath.Join(rel, name)))
			}
		}
	}
	if len(out) == 0 {
		// Imported only through generated or otherwise listed files: name
		// the package.
		rel, _ := ours(p.ImportPath)
		out = append(out, rel+"/*")
	}
	return out
}
