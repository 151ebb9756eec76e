package web_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/web"
	"github.com/stockade-dev/stockade/web/webtest"
)

// funcs is a package's functions by name (methods under their name alone,
// so same-named methods of two types merge: the analysis over-approximates,
// never misses), each with the names it refers to and the "receiver.name"
// selectors it uses.
type funcs map[string]*funcRefs

type funcRefs struct {
	names     map[string]bool // identifiers and selector names referred to
	selectors map[string]bool // "x.Name" for selector x.Name (x an identifier or a selector's last name)
}

// parseFuncs reads the non-test Go files of dir.
func parseFuncs(t *testing.T, dir string) funcs {
	t.Helper()
	fset := token.NewFileSet()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): %v", dir, err)
	}
	out := funcs{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", n, err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			r := out[fd.Name.Name]
			if r == nil {
				r = &funcRefs{names: map[string]bool{}, selectors: map[string]bool{}}
				out[fd.Name.Name] = r
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.Ident:
					r.names[x.Name] = true
				case *ast.SelectorExpr:
					r.names[x.Sel.Name] = true
					switch recv := x.X.(type) {
					case *ast.Ident:
						r.selectors[recv.Name+"."+x.Sel.Name] = true
					case *ast.SelectorExpr:
						r.selectors[recv.Sel.Name+"."+x.Sel.Name] = true
					}
				}
				return true
			})
		}
	}
	return out
}

// closure is the functions of fs that use one of seeds (selectors such as
// "vms.Agent", or a name of ext: another package's channel functions
// reached through the field named by the key's prefix), directly or
// through other functions of fs.
func (fs funcs) closure(seeds []string, ext map[string]bool) map[string]bool {
	in := map[string]bool{}
	for name, r := range fs {
		for _, s := range seeds {
			if r.selectors[s] {
				in[name] = true
			}
		}
		for s := range ext {
			if r.selectors[s] {
				in[name] = true
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for name, r := range fs {
			if in[name] {
				continue
			}
			for callee := range in {
				if r.names[callee] {
					in[name], changed = true, true
					break
				}
			}
		}
	}
	return in
}

// exported are the exported names of set, as selectors through field.
func exported(set map[string]bool, field string) map[string]bool {
	out := map[string]bool{}
	for n := range set {
		if ast.IsExported(n) {
			out[field+"."+n] = true
		}
	}
	return out
}

// channelExempt are routes whose handlers reach channel code without
// needing one sandbox's channel: what they use is answered from the
// database (or the live presence of this replica's terminals, shown as a
// hint), or the route has no sandbox to route by.
var channelExempt = map[string]string{
	"POST /sandboxes":                   "create: the replica that places the sandbox opens the channel of the VM it picks (lease's ownership)",
	"GET /":                             "the dashboard: many sandboxes; live terminal presence is this replica's hint",
	"GET /sandboxes":                    "the list: many sandboxes, from the database",
	"GET /terminals":                    "sessions from the database; live presence is this replica's hint",
	"GET /terminals/live":               "as GET /terminals",
	"GET /terminals/:id":                "a session's page (its id is not a sandbox's); its WebSocket is the channel route",
	"GET /api/v1/terminals":             "as GET /terminals",
	"GET /api/v1/terminals/:id":         "as GET /terminals/:id",
	"GET /api/v1/terminals/:id/cast":    "the recording: a file of the replica that records it (not forwarded yet)",
	"POST /operator/tenants/:id/freeze": "destroys a whole tenant's sandboxes, on many VMs: each Destroy tolerates an agent out of reach",
	"POST /api/v1/tenants/:id/freeze":   "as POST /operator/tenants/:id/freeze",
	"POST /policy":                      "applies to every running sandbox of the tenant, on many VMs",
	"POST /policy/rollback":             "as POST /policy",
	"POST /vms":                         "a VM, not a sandbox: VM routes follow vmpool's ownership",
	"GET /api/v1/vms/:id":               "a VM, not a sandbox",
	"DELETE /api/v1/vms/:id":            "a VM, not a sandbox",
	"POST /vms/:id/destroy":             "a VM, not a sandbox",
	"POST /operator/vms/:id/destroy":    "a VM, not a sandbox",
	"DELETE /api/v1/templates/:name":    "a template, not a sandbox: its versions are unplugged from every VM of the tenant this replica reaches; a VM it cannot (another replica's) keeps the disk, logged, until it ends (the deleted file's inode stays valid)",
	"POST /templates/:name/delete":      "as DELETE /api/v1/templates/:name",
}

// TestChannelRoutesMarked: every route whose handler reaches a sandbox's
// VM agent channel (sandbox.Service code that calls the pools' Agent, or
// holds a live process; terminal.Service code that reaches those or holds
// a live terminal) names the sandbox parameter in Channel, so a replica
// that does not own the channel forwards it; the rest are exempt above,
// with why. A route marked that reaches no channel is an error too.
func TestChannelRoutesMarked(t *testing.T) {
	sbx := parseFuncs(t, filepath.Join("..", "sandbox")).closure([]string{"vms.Agent", "s.procs"}, nil)
	terms := parseFuncs(t, filepath.Join("..", "sandbox", "terminal")).closure([]string{"s.live"}, exported(sbx, "sbx"))
	// Handlers reach the services as h.sbx and h.terms, or as svc from
	// h.sandboxService() and h.terminalService().
	ext := map[string]bool{}
	for _, m := range []map[string]bool{exported(sbx, "sbx"), exported(sbx, "svc"), exported(terms, "terms"), exported(terms, "svc")} {
		for k := range m {
			ext[k] = true
		}
	}
	hs := parseFuncs(t, filepath.Join("..", "handlers")).closure(nil, ext)

	env := webtest.New(t, webtest.Options{})
	seen := map[string]bool{}
	var missing, needless []string
	for _, r := range env.App.RouteTable() {
		key := r.Method + " " + r.Path
		if seen[key] {
			continue
		}
		seen[key] = true
		name := handlerName(r)
		channel := hs[name]
		_, exempt := channelExempt[key]
		switch {
		case channel && r.Channel == "" && !exempt:
			missing = append(missing, key+" ("+name+")")
		case !channel && r.Channel != "":
			needless = append(needless, key+" ("+name+")")
		case r.Channel != "" && !strings.Contains(r.Path, ":"+r.Channel):
			t.Errorf("Got(%s Channel) = %q; want a parameter of its path", key, r.Channel)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("Got(%s) reaches a sandbox's agent channel, unmarked; want Channel: \"id\" (or an exemption saying why)", m)
	}
	for _, m := range needless {
		t.Errorf("Got(%s) marked Channel; want it reaching the channel (found no call into channel code)", m)
	}
	for key := range channelExempt {
		if !seen[key] {
			t.Errorf("Got(exempt %s) = not in the route table; want the exemption removed", key)
		}
	}
}

// handlerName is the handlers function a route's handler is: a method
// value's name, or, for a wrapper (Idempotent), the handler it wraps is
// not visible and the wrapper's name is returned.
func handlerName(r web.Route) string {
	full := runtime.FuncForPC(reflect.ValueOf(r.Handler).Pointer()).Name()
	full = strings.TrimSuffix(full, "-fm")
	if i := strings.LastIndex(full, "."); i >= 0 {
		name := full[i+1:]
		if strings.HasPrefix(name, "func") { // a closure: name the function that made it
			rest := full[:i]
			if j := strings.LastIndex(rest, "."); j >= 0 {
				return rest[j+1:]
			}
		}
		return name
	}
	return full
}
