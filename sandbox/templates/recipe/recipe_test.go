package recipe_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/templates/recipe"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

func fields(err error) []string {
	var out []string
	for _, fe := range errdefs.FieldErrors(err) {
		out = append(out, fe.Field+":"+fe.Rule)
	}
	return out
}

func TestParseExample(t *testing.T) {
	r, err := recipe.Parse([]byte(recipe.Example))
	if err != nil {
		t.Fatalf("Parse(Example) = %v; want nil", err)
	}
	if r.Name != "jq-tools" || r.Base != "debian" || !slices.Equal(r.Packages, []string{"jq", "tree"}) {
		t.Errorf("Parse(Example) = %+v; want jq-tools on debian with jq, tree", r)
	}
	if f := r.Files["/etc/motd"]; f.Content != "built from a recipe\n" || f.Perm() != 0o644 {
		t.Errorf("Files[/etc/motd] = %+v; want the motd, 0644", f)
	}
}

// TestDigestCanonical: the same recipe as JSON with fields in another
// order has the YAML's digest; any change changes it.
func TestDigestCanonical(t *testing.T) {
	yamlR, err := recipe.Parse([]byte(recipe.Example))
	if err != nil {
		t.Fatal(err)
	}
	js := `{"setup":["jq --version > jq-version.txt"],"workdir":"/opt/tools","env":{"EDITOR":"nano"},
	"files":{"/etc/motd":{"mode":"0644","content":"built from a recipe\n"}},"packages":["jq","tree"],
	"base":"debian","name":"jq-tools","apiVersion":"stockade.dev/template/v1"}`
	jsonR, err := recipe.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jsonR.Digest(), yamlR.Digest(); got != want {
		t.Errorf("Digest(JSON) = %s; want the YAML's %s", got, want)
	}
	changed, err := recipe.Parse([]byte(strings.Replace(recipe.Example, "- tree", "- file", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if changed.Digest() == yamlR.Digest() {
		t.Errorf("Digest of a changed recipe = the original's %s; want another", yamlR.Digest())
	}
	if !strings.HasPrefix(yamlR.Digest(), "sha256:") || len(yamlR.Digest()) != 71 {
		t.Errorf("Digest() = %q; want sha256:<64 hex>", yamlR.Digest())
	}
}

func TestParseRefuses(t *testing.T) {
	head := "apiVersion: stockade.dev/template/v1\nname: t\n"
	tests := []struct {
		name, src string
		want      []string
	}{
		{"empty", "", []string{"/:required"}},
		{"not yaml", "name: [", []string{"/:syntax"}},
		{"list", "- a\n", []string{"/:type"}},
		{"no version", "name: t\nbase: debian\n", []string{"/apiVersion:required"}},
		{"other version", "apiVersion: v9\nname: t\nbase: debian\n", []string{"/apiVersion:unsupported"}},
		{"unknown field", head + "base: debian\nbaes: debian\n", []string{"/baes:unknown"}},
		{"unknown base", head + "base: alpine\n", []string{"/base:unknown"}},
		{"busybox packages", head + "base: busybox\npackages: [jq]\n", []string{"/packages:base"}},
		{"bad name", "apiVersion: stockade.dev/template/v1\nname: Bad Name\nbase: debian\n", []string{"/name:format"}},
		{"bad package", head + "base: debian\npackages: [jq, 'rm -rf', jq]\n", []string{"/packages/1:format", "/packages/2:duplicate"}},
		{"relative file", head + "base: debian\nfiles:\n  etc/x: {content: a}\n", []string{"/files/etc~1x:path"}},
		{"escaping file", head + "base: debian\nfiles:\n  /etc/../../x: {content: a}\n", []string{"/files/~1etc~1..~1..~1x:path"}},
		{"proc file", head + "base: debian\nfiles:\n  /proc/x: {content: a}\n", []string{"/files/~1proc~1x:path"}},
		{"marker file", head + "base: debian\nfiles:\n  /etc/stockade-template.json: {content: a}\n", []string{"/files/~1etc~1stockade-template.json:path"}},
		{"file fields", head + "base: debian\nfiles:\n  /x: {body: a, mode: '999'}\n",
			[]string{"/files/~1x/body:unknown", "/files/~1x/content:required", "/files/~1x/mode:format"}},
		{"root user", head + "base: debian\nuser: root\n", []string{"/user:root"}},
		{"env key", head + "base: debian\nenv: {'1X': a}\n", []string{"/env/1X:format"}},
		{"relative workdir", head + "base: debian\nworkdir: work\n", []string{"/workdir:path"}},
		{"empty setup", head + "base: debian\nsetup: ['  ']\n", []string{"/setup/0:required"}},
		{"setup not list", head + "base: debian\nsetup: make\n", []string{"/setup:type"}},
		{"all at once", "apiVersion: stockade.dev/template/v1\nbase: alpine\nuser: root\n",
			[]string{"/base:unknown", "/name:required", "/user:root"}},
		{"oversized", head + "base: debian\nsetup: ['" + strings.Repeat("x", recipe.MaxSourceBytes) + "']\n", []string{"/:size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := recipe.Parse([]byte(tt.src))
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Parse() = %v; want ErrInvalid", err)
			}
			if got := fields(err); !slices.Equal(got, tt.want) {
				t.Errorf("Parse() fields = %v; want %v (%v)", got, tt.want, err)
			}
		})
	}
}
