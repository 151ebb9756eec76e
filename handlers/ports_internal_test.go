package handlers

import (
	"net/http"
	"testing"
)

// TestPreviewHostOf: only <port>-<id>.<preview domain> (any case, any
// listener port) is a preview host; a port out of range, a deeper name,
// another domain or no domain configured is not.
func TestPreviewHostOf(t *testing.T) {
	const id = "01a23338-ec67-7ad9-ad1c-0da9769ae9d6"
	h := &Handlers{cfg: Config{PreviewDomain: "preview.example.net"}}
	for _, c := range []struct {
		host string
		port int
		ok   bool
	}{
		{"8000-" + id + ".preview.example.net", 8000, true},
		{"8000-" + id + ".PREVIEW.example.net:8443", 8000, true},
		{"0-" + id + ".preview.example.net", 0, false},
		{"70000-" + id + ".preview.example.net", 0, false},
		{"x.8000-" + id + ".preview.example.net", 0, false},
		{"8000-" + id + ".example.net", 0, false},
		{"8000-.preview.example.net", 0, false},
		{"preview.example.net", 0, false},
	} {
		port, got, ok := h.previewHostOf(c.host)
		if ok != c.ok || port != c.port || (ok && got != id) {
			t.Errorf("Got(previewHostOf(%q)) = %d, %q, %v; want %d, %v", c.host, port, got, ok, c.port, c.ok)
		}
	}
	none := &Handlers{}
	if _, _, ok := none.previewHostOf("8000-" + id + ".preview.example.net"); ok {
		t.Errorf("Got(a preview host without STOCKADE_PREVIEW_DOMAIN) = true; want false")
	}
}

// TestStripCredentials: what authenticated the caller to the console is
// removed from a request before it goes to a sandbox; the rest stays.
func TestStripCredentials(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://localhost:8000/", nil)
	r.Header.Set("Authorization", "Bearer stk_x")
	r.Header.Set("X-CSRF-Token", "csrf")
	r.Header.Set("Cookie", "stockade_session=s; __Host-stockade_session=t; stockade_preview=p; app=kept")
	r.Header.Set("Accept", "text/html")
	stripCredentials(r)
	if got := r.Header.Get("Cookie"); got != "app=kept" {
		t.Errorf("Got(Cookie) = %q; want app=kept", got)
	}
	for _, k := range []string{"Authorization", "X-Csrf-Token"} {
		if v := r.Header.Get(k); v != "" {
			t.Errorf("Got(%s) = %q; want none", k, v)
		}
	}
	if r.Header.Get("Accept") != "text/html" {
		t.Errorf("Got(Accept) = %q; want it kept", r.Header.Get("Accept"))
	}
}
