package e2b_test

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/sandbox"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// e2bCode is the code of E2B's {code,message} error body (0: not one).
func e2bCode(body string) int {
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Message == "" {
		return 0
	}
	return e.Code
}

// TestE2BControlPlane drives the E2B control plane and envd's auth over
// HTTP against the whole app without VMs (sandboxes are stored records):
// the key (a token or its e2b_ alias), E2B's error bodies, tenant
// isolation, roles, list filters and paging, create's refusal of options
// it does not serve, and envd's per-sandbox access token.
// The access tokens are stored, so it runs on SQLite and PostgreSQL.
func TestE2BControlPlane(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { testControlPlane(t, d.DB) })
	}
}

func testControlPlane(t *testing.T, db *gorm.DB) {
	env := webtest.New(t, webtest.Options{DB: db})
	tnA, tnB := env.Tenant(t, "e2b-cp-a"), env.Tenant(t, "e2b-cp-b")
	sbA1 := sandboxtest.Record(t, env.DB, tnA.ID, "fixture")
	sbA2 := sandboxtest.Record(t, env.DB, tnA.ID, "fixture")
	sbB := sandboxtest.Record(t, env.DB, tnB.ID, "fixture")
	// A paused one (the record is the truth: paused_at set, still running).
	sbP := sandboxtest.Record(t, env.DB, tnA.ID, "fixture")
	if err := env.DB.Model(&sandbox.Sandbox{}).Where("id = ?", sbP.ID).Update("paused_at", time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
	tokA, tokB := env.Token(t, tnA, tenants.RoleDeveloper), env.Token(t, tnB, tenants.RoleDeveloper)
	tokAudit := env.Token(t, tnA, tenants.RoleAuditor)
	api := env.URL + "/e2b"
	alias := "e2b_" + hex.EncodeToString([]byte(tokA))

	tests := []struct {
		name, method, path, body, key string
		status                        int
		want                          string // in the body
	}{
		{"no key", "GET", "/v2/sandboxes", "", "", 401, "X-API-KEY"},
		{"wrong key", "GET", "/v2/sandboxes", "", "stk_nope_nope", 401, "invalid API key"},
		{"wrong alias", "GET", "/v2/sandboxes", "", "e2b_00ff", 401, "invalid API key"},
		{"alias", "GET", "/v2/sandboxes", "", alias, 200, sbA1.ID},
		{"token", "GET", "/sandboxes/" + sbA1.ID, "", tokA, 200, `"state":"running"`},
		{"another tenant's get", "GET", "/sandboxes/" + sbB.ID, "", tokA, 404, "not found"},
		{"another tenant's kill", "DELETE", "/sandboxes/" + sbB.ID, "", tokA, 404, "not found"},
		{"another tenant's timeout", "POST", "/sandboxes/" + sbB.ID + "/timeout", `{"timeout":60}`, tokA, 404, "not found"},
		{"another tenant's connect", "POST", "/v2/sandboxes/" + sbB.ID + "/connect", `{"timeout":60}`, tokA, 404, "not found"},
		{"another tenant's pause", "POST", "/sandboxes/" + sbB.ID + "/pause", `{}`, tokA, 404, "not found"},
		{"paused get", "GET", "/sandboxes/" + sbP.ID, "", tokA, 200, `"state":"paused"`},
		{"no resume route", "POST", "/sandboxes/" + sbA1.ID + "/resume", `{}`, tokA, 404, "no such E2B API route"},
		{"unsupported options", "POST", "/v2/sandboxes", `{"templateID":"base","network":{"allowOut":["1.1.1.1"]},"volumeMounts":[{"name":"v","path":"/v"}],"autoPause":true}`, tokA, 400, "autoPause, network, volumeMounts"},
		{"no internet", "POST", "/sandboxes", `{"templateID":"base","allow_internet_access":false}`, tokA, 400, "allow_internet_access"},
		{"malformed", "POST", "/v2/sandboxes", `[1]`, tokA, 400, "JSON object"},
		{"read-only role creates", "POST", "/v2/sandboxes", `{"templateID":"base"}`, tokAudit, 403, "sandboxes.write"},
		{"bad state", "GET", "/v2/sandboxes?state=gone", "", tokA, 400, "state"},
		{"bad limit", "GET", "/v2/sandboxes?limit=0", "", tokA, 400, "limit"},
		{"unknown route", "GET", "/v3/things", "", tokA, 404, "no such E2B API route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.key != "" {
				hdr = []string{"X-API-KEY", tt.key}
			}
			a := do(t, tt.method, api+tt.path, tt.body, hdr...)
			if a.status != tt.status || !strings.Contains(a.body, tt.want) {
				t.Errorf("Got(%s %s) = %d %s; want %d with %q", tt.method, tt.path, a.status, a.body, tt.status, tt.want)
			}
			if tt.status >= 400 && e2bCode(a.body) != tt.status {
				t.Errorf("Got(%s %s) body %s; want E2B's {code: %d, message}", tt.method, tt.path, a.body, tt.status)
			}
		})
	}
	// Nothing was created by the refused creates; B's sandbox is intact.
	var list []map[string]any
	if a := do(t, "GET", api+"/v2/sandboxes", "", "X-API-KEY", tokA); json.Unmarshal([]byte(a.body), &list) != nil || len(list) != 3 {
		t.Errorf("Got(A's sandboxes after refused creates) = %s; want its three", a.body)
	}
	// The state filter: a paused sandbox is listed as paused, and only
	// under state=paused.
	for _, tt := range []struct {
		query     string
		want, not []string
	}{
		{"state=paused", []string{sbP.ID}, []string{sbA1.ID, sbA2.ID}},
		{"state=running", []string{sbA1.ID, sbA2.ID}, []string{sbP.ID}},
		{"state=running,paused", []string{sbA1.ID, sbA2.ID, sbP.ID}, nil},
	} {
		a := do(t, "GET", api+"/v2/sandboxes?"+tt.query, "", "X-API-KEY", tokA)
		var items []map[string]any
		_ = json.Unmarshal([]byte(a.body), &items)
		got := map[string]any{}
		for _, it := range items {
			got[it["sandboxID"].(string)] = it["state"]
		}
		for _, id := range tt.want {
			want := "running"
			if id == sbP.ID {
				want = "paused"
			}
			if got[id] != want {
				t.Errorf("Got(list %s) = %s; want %s listed %s", tt.query, a.body, id, want)
			}
		}
		for _, id := range tt.not {
			if _, ok := got[id]; ok {
				t.Errorf("Got(list %s) = %s; want no %s", tt.query, a.body, id)
			}
		}
	}
	if a := do(t, "GET", api+"/sandboxes/"+sbB.ID, "", "X-API-KEY", tokB); a.status != 200 {
		t.Errorf("Got(B's own sandbox) = %d %s; want 200", a.status, a.body)
	}

	// Metadata filter, and paging by X-Next-Token.
	a := do(t, "GET", api+"/v2/sandboxes?metadata="+"fixture%3D"+sbA2.ID, "", "X-API-KEY", tokA)
	if !strings.Contains(a.body, sbA2.ID) || strings.Contains(a.body, sbA1.ID) {
		t.Errorf("Got(list by metadata fixture=%s) = %s; want only that sandbox", sbA2.ID, a.body)
	}
	seen := map[string]bool{}
	next := ""
	for page := 0; page < 3; page++ {
		a := do(t, "GET", api+"/v2/sandboxes?limit=1&nextToken="+next, "", "X-API-KEY", tokA)
		var items []map[string]any
		if err := json.Unmarshal([]byte(a.body), &items); err != nil || len(items) != 1 {
			t.Fatalf("Got(page %d) = %s; want one sandbox", page, a.body)
		}
		seen[items[0]["sandboxID"].(string)] = true
		if next = a.header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	if !seen[sbA1.ID] || !seen[sbA2.ID] || next != "" {
		t.Errorf("Got(paged list) = %v, last token %q; want both of A's sandboxes, then no token", seen, next)
	}

	// connect hands out an access token for that sandbox only.
	a = do(t, "POST", api+"/v2/sandboxes/"+sbA1.ID+"/connect", `{"timeout":10}`, "X-API-KEY", tokA)
	var sb struct {
		SandboxID, EnvdVersion, EnvdAccessToken string
	}
	if err := json.Unmarshal([]byte(a.body), &sb); err != nil || a.status != 200 || sb.SandboxID != sbA1.ID || sb.EnvdVersion != "0.5.7" || sb.EnvdAccessToken == "" {
		t.Fatalf("Got(connect) = %d %s; want 200 with the sandbox, envd 0.5.7 and an access token", a.status, a.body)
	}
	rpc := func(sandboxID, token string) answer {
		return do(t, "POST", env.URL+"/process.Process/List", "{}", "Connect-Protocol-Version", "1", "E2b-Sandbox-Id", sandboxID, "X-Access-Token", token)
	}
	for _, tt := range []struct {
		name, sandbox, token string
	}{
		{"no token", sbA1.ID, ""},
		{"wrong token", sbA1.ID, "e2bat_00"},
		{"A's token on A2", sbA2.ID, sb.EnvdAccessToken},
		{"A's token on B", sbB.ID, sb.EnvdAccessToken},
		{"the API key as access token", sbA1.ID, tokA},
	} {
		if a := rpc(tt.sandbox, tt.token); a.status != 401 || !strings.Contains(a.body, `"code":"unauthenticated"`) {
			t.Errorf("Got(%s: process.Process/List) = %d %s; want 401 unauthenticated", tt.name, a.status, a.body)
		}
	}
	if a := rpc(sbA1.ID, sb.EnvdAccessToken); a.status == 401 {
		t.Errorf("Got(A's token on A: process.Process/List) = %d %s; want past auth", a.status, a.body)
	}
	if a := do(t, "GET", env.URL+"/files?path=/etc/hostname", "", "E2b-Sandbox-Id", sbB.ID, "X-Access-Token", sb.EnvdAccessToken); a.status != 401 || e2bCode(a.body) != 401 {
		t.Errorf("Got(A's token on B: GET /files) = %d %s; want 401 {code:401}", a.status, a.body)
	}
	if a := do(t, "GET", env.URL+"/health", "", "E2b-Sandbox-Id", sbB.ID, "X-Access-Token", sb.EnvdAccessToken); a.status != 502 {
		t.Errorf("Got(A's token on B: /health) = %d; want 502", a.status)
	}
	root := "Basic " + "cm9vdDo=" // root:
	if a := do(t, "POST", env.URL+"/process.Process/List", "{}", "Connect-Protocol-Version", "1", "E2b-Sandbox-Id", sbA1.ID,
		"X-Access-Token", sb.EnvdAccessToken, "Authorization", root); a.status != 403 || !strings.Contains(a.body, "permission_denied") {
		t.Errorf("Got(user root) = %d %s; want 403 permission_denied", a.status, a.body)
	}
	if a := do(t, "GET", env.URL+"/health", "", "E2b-Sandbox-Id", sbA1.ID, "X-Access-Token", sb.EnvdAccessToken, "E2b-Sandbox-Port", "8080"); a.status != 502 {
		t.Errorf("Got(port 8080) = %d; want 502", a.status)
	}
}
