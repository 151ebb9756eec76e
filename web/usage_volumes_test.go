package web_test

import (
	"net/http"
	"strings"
	"testing"

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
