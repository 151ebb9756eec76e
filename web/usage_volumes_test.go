package web_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestUsageVolumes: a volume the tenant holds is on its usage page as
// volume storage (GiB-months and cost), and not on another tenant's.
func TestUsageVolumes(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	a := env.TenantNamed(t, "vol-usage-a", "A")
	b := env.TenantNamed(t, "vol-usage-b", "B")
	env.Member(t, a, "admin@a.example.com", tenants.RoleAdmin)
	env.Member(t, b, "admin@b.example.com", tenants.RoleAdmin)
	c := env.WithToken(env.Token(t, a, tenants.RoleAdmin))
	if status, body := c.JSON(t, http.MethodPost, "/api/v1/volumes", map[string]any{"name": "npm-cache", "size_gib": 2}, nil); status != http.StatusCreated {
		t.Fatalf("Got(POST /api/v1/volumes) = %d %s; want 201", status, body)
	}
	status, page := env.Login(t, "admin@a.example.com").GetPage(t, "/usage")
	if status != 200 || !strings.Contains(page, `id="usage-volumes"`) || !strings.Contains(page, "npm-cache") {
		t.Errorf("Got(GET /usage of A) = %d; want the volume storage table naming npm-cache:\n%s", status, page)
	}
	status, page = env.Login(t, "admin@b.example.com").GetPage(t, "/usage")
	if status != 200 || strings.Contains(page, "npm-cache") || !strings.Contains(page, "No volume held in this period") {
		t.Errorf("Got(GET /usage of B) = %d; want no volume of A's", status)
	}
}

// TestUsageVolumesBrowser renders the usage page with a volume in headless
// Chromium (desktop and phone) and saves screenshots; CSP reports fail it.
func TestUsageVolumesBrowser(t *testing.T) {
	b := webtest.NewBrowser(t)
	env := webtest.New(t, webtest.Options{})
	a := env.TenantNamed(t, "acme-corp", "Acme Corporation")
	env.Member(t, a, "admin@example.com", tenants.RoleAdmin)
	c := env.WithToken(env.Token(t, a, tenants.RoleAdmin))
	if status, body := c.JSON(t, http.MethodPost, "/api/v1/volumes", map[string]any{"name": "npm-cache", "size_gib": 4}, nil); status != http.StatusCreated {
		t.Fatalf("Got(POST /api/v1/volumes) = %d %s; want 201", status, body)
	}
	css := webtest.CSS
	b.WatchCSP(t)
	b.Login(t, env.URL+"/usage", "admin@example.com", `#usage-volumes`)
	for _, size := range []struct {
		name string
		w, h int64
	}{{"desktop", 1366, 900}, {"phone", 390, 844}} {
		b.Do(t, "usage "+size.name, chromedp.EmulateViewport(size.w, size.h), chromedp.Navigate(env.URL+"/usage#usage-volumes-title"),
			chromedp.WaitVisible(css(`#usage-volumes`)), chromedp.ScrollIntoView(css(`#usage-volumes`)))
		if got := b.Text(t, `#usage-volumes`); !strings.Contains(got, "npm-cache") {
			t.Errorf("Got(volume storage table, %s) = %q; want npm-cache", size.name, got)
		}
		b.Screenshot(t, artifacts, "usage-volumes-"+size.name+".png")
	}
}
