package static

import (
	"io/fs"
	"testing"
	"testing/fstest"
)

func TestFSHoldsServedAssets(t *testing.T) {
	// Pages link these paths; a missing one is a broken page, not a build error.
	for _, path := range []string{
		"css/app.css",
		"js/app.js",
		"img/favicon.svg",
		"vendor/htmx/htmx.min.js",
		"vendor/xterm/xterm.js",
		"vendor/xterm/xterm.css",
		"vendor/xterm/addon-fit.js",
	} {
		t.Run(path, func(t *testing.T) {
			b, err := fs.ReadFile(FS, path)
			if err != nil {
				t.Fatalf("Got(ReadFile(%q)) error %v; want the file", path, err)
			}
			if len(b) == 0 {
				t.Errorf("Got(len(%q)) = 0; want content", path)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	v, err := Version()
	if err != nil {
		t.Fatalf("Version() error: %v", err)
	}
	if len(v) != 12 {
		t.Errorf("Got(len(Version())) = %d; want 12", len(v))
	}
	again, err := Version()
	if err != nil {
		t.Fatalf("Version() error: %v", err)
	}
	if again != v {
		t.Errorf("Got(Version()) = %q then %q; want the same value", v, again)
	}
}

func TestHashFSChangesWithContent(t *testing.T) {
	base := fstest.MapFS{
		"css/app.css": {Data: []byte("body{}")},
		"js/app.js":   {Data: []byte("1")},
	}
	tests := []struct {
		name string
		fsys fstest.MapFS
		same bool
	}{
		{"identical", fstest.MapFS{"css/app.css": {Data: []byte("body{}")}, "js/app.js": {Data: []byte("1")}}, true},
		{"content changed", fstest.MapFS{"css/app.css": {Data: []byte("body{ }")}, "js/app.js": {Data: []byte("1")}}, false},
		{"file renamed", fstest.MapFS{"css/app2.css": {Data: []byte("body{}")}, "js/app.js": {Data: []byte("1")}}, false},
		{"bytes moved between files", fstest.MapFS{"css/app.css": {Data: []byte("body{}1")}, "js/app.js": {Data: []byte("")}}, false},
		{"file added", fstest.MapFS{"css/app.css": {Data: []byte("body{}")}, "js/app.js": {Data: []byte("1")}, "x": {}}, false},
	}
	want, err := hashFS(base)
	if err != nil {
		t.Fatalf("hashFS(base) error: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := hashFS(tt.fsys)
			if err != nil {
				t.Fatalf("hashFS error: %v", err)
			}
			if (got == want) != tt.same {
				t.Errorf("Got(hashFS) = %q, base %q; want same=%v", got, want, tt.same)
			}
		})
	}
}
