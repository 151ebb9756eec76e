package agent

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestImports holds the guest side to its import rule: it is built static
// into the VM and imports only the wire types (sandbox/agentproto) and its
// own packages, in one direction: the VM init serves the agent, the agent is
// the client of the sandbox init, and both inits reap with reaper. Every
// package under sandbox/agent must be in the table, so a new one cannot
// slip past it. Test files are held to the same rule, but for what a test
// checks the guest against (testAllowed).
func TestImports(t *testing.T) {
	const mod = "github.com/stockade-dev/stockade/"
	allowed := map[string][]string{
		"sandbox/agent":             {"sandbox/agentproto", "sandbox/agent/sandboxinit"},
		"sandbox/agent/vminit":      {"sandbox/agentproto", "sandbox/agent", "sandbox/agent/reaper"},
		"sandbox/agent/sandboxinit": {"sandbox/agentproto", "sandbox/agent/reaper"},
		"sandbox/agent/reaper":      {},
		// The stub init's tests (its source and build are the image
		// build's: hypervisor/image/stubinit).
		"sandbox/agent/stubinit": {},
	}
	// A test may also import what it checks the guest against: the agent
	// finds the scratch disk hypervisor/image makes (TestXFSLabel), and the
	// upper layer it streams is applied on the host by the oci applier
	// (TestUpperOverRealOverlay). Test files are not built into the guest.
	testAllowed := map[string][]string{
		"sandbox/agent": {"hypervisor/image", "sandbox/templates/oci"},
		// It speaks the init protocol to the Go init and the stub.
		"sandbox/agent/stubinit": {"sandbox/agent/sandboxinit", "hypervisor/image/stubinit"},
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(".", func(dir string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || d.Name() == "testdata" {
			return err
		}
		pkg, err := build.ImportDir(dir, build.ImportComment)
		if _, none := err.(*build.NoGoError); none {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join("sandbox/agent", dir))
		seen[name] = true
		allow, ok := allowed[name]
		if !ok {
			t.Errorf("Got(package %s); want it in TestImports's table", name)
			return nil
		}
		for _, imp := range pkg.Imports {
			own, ours := strings.CutPrefix(imp, mod)
			if ours && !slices.Contains(allow, own) {
				t.Errorf("Got(%s imports %s); want only %v of ours", name, own, allow)
			}
		}
		for _, imp := range slices.Concat(pkg.TestImports, pkg.XTestImports) {
			own, ours := strings.CutPrefix(imp, mod)
			if ours && !slices.Contains(allow, own) && !slices.Contains(testAllowed[name], own) {
				t.Errorf("Got(%s imports %s); want only %v of ours", name, own, allow)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range allowed {
		if !seen[name] {
			t.Errorf("Got(no package %s); want the table to match the tree", name)
		}
	}
}
