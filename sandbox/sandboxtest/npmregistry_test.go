package sandboxtest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
)

// TestNPMRegistry: a package published to the test registry installs from
// it with npm (its install script run), and the registry serves nothing it
// was not given (no uplink to npmjs.org).
func TestNPMRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts verdaccio")
	}
	reg := sandboxtest.StartNPMRegistry(t)
	pkg := t.TempDir()
	files := map[string]string{
		"package.json": `{"name":"stockade-probe","version":"1.2.3","scripts":{"postinstall":"node mark.js"}}`,
		"mark.js":      `require("fs").writeFileSync(process.env.INIT_CWD + "/marked", "installed")`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg.Publish(t, pkg)

	resp, err := http.Get(reg.URL + "stockade-probe")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		DistTags map[string]string `json:"dist-tags"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || doc.DistTags["latest"] != "1.2.3" {
		t.Errorf("Got(GET /stockade-probe) = %+v, %v; want latest 1.2.3", doc, err)
	}
	if resp, err := http.Get(reg.URL + "left-pad"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("Got(GET /left-pad) = %v, %v; want 404 (no uplink)", resp, err)
	} else {
		resp.Body.Close()
	}

	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name":"app","version":"0.0.0","private":true,"dependencies":{"stockade-probe":"1.2.3"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--registry", reg.URL, "--no-audit", "--no-fund")
	cmd.Dir = app
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(t.TempDir(), "cache"), "npm_config_userconfig=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(app, "marked")); err != nil || string(b) != "installed" {
		t.Errorf("Got(the postinstall's mark) = %q, %v; want installed", b, err)
	}
}
