package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestTemplateImportCommand: an archive uploads as a new version, a bad
// one prints the server's reason naming the field, a registry the
// operator does not allow is refused, and bad usage exits 2.
func TestTemplateImportCommand(t *testing.T) {
	e := webtest.New(t, webtest.Options{})
	tn := e.TenantNamed(t, "cli-tpl", "CLI Templates")
	dev := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleDeveloper)})
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.tar"), filepath.Join(dir, "bad.tar")
	os.WriteFile(good, ocitest.DockerTar(t, ocitest.Image(t, []string{"A=b"}, "", "", ocitest.Layer(t, ocitest.File("hello", "hi")))), 0o644)
	os.WriteFile(bad, ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.Symlink("s", "../../etc")))), 0o644)

	out, _, err := cli(t, dev, "template", "import", "cli", good)
	if err != nil || !strings.HasPrefix(out, "template cli version 1 (") || !strings.Contains(out, "from upload@sha256:") {
		t.Fatalf("Got(template import FILE) = %q, %v; want version 1 from the upload", out, err)
	}
	if _, _, err := cli(t, dev, "template", "import", "cli2", bad); err == nil || !strings.Contains(err.Error(), "422") ||
		!strings.Contains(err.Error(), "image: layer 1 of 1") || !strings.Contains(err.Error(), "points outside the image root") {
		t.Errorf("Got(template import BAD) err = %v; want 422 naming the layer and the escape", err)
	}
	if _, _, err := cli(t, dev, "template", "import", "cli3", "--image", "registry.example.test/a/b:1"); err == nil || !strings.Contains(err.Error(), "not one the operator allows") {
		t.Errorf("Got(template import --image) err = %v; want the registry refused", err)
	}
	for _, args := range [][]string{{}, {"--image", "x"}, {"n"}, {"n", good, "--image", "x"}, {"n", good, "--credentials", "S"}} {
		_, _, err := cli(t, dev, append([]string{"template", "import"}, args...)...)
		var ee exitError
		if !errors.As(err, &ee) || ee != 2 {
			t.Errorf("Got(template import %q) = %v; want exit 2", args, err)
		}
	}
}
