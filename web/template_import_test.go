package web_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/web/webtest"
)

func importForm(t *testing.T, fields map[string]string, archive []byte) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if archive != nil {
		fw, err := mw.CreateFormFile("image", "image.tar")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(archive)
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func templateRows(t *testing.T, env *webtest.Env) (int64, int64) {
	t.Helper()
	var tn, vn int64
	env.DB.Model(&templates.Template{}).Where("deleted_at IS NULL").Count(&tn)
	env.DB.Model(&templates.Version{}).Count(&vn)
	return tn, vn
}

// TestTemplateImportAPI imports an image archive over the API (multipart
// and raw tar) and refuses bad ones with a problem, leaving no row.
func TestTemplateImportAPI(t *testing.T) {
	env := webtest.New(t, webtest.Options{TemplateMaxUploadBytes: 1 << 20})
	acme := env.Tenant(t, "acme")
	dev := env.WithToken(env.Token(t, acme, tenants.RoleDeveloper))
	img := ocitest.Image(t, []string{"GREETING=hi"}, "/srv", "", ocitest.Layer(t, ocitest.Dir("etc"), ocitest.File("srv/hello.txt", "hello")))

	ct, body := importForm(t, map[string]string{"name": "web"}, ocitest.DockerTar(t, img))
	status, out, _ := dev.Request(t, http.MethodPost, "/api/v1/templates/import", ct, body)
	if status != http.StatusCreated {
		t.Fatalf("Got(POST multipart) = %d %s; want 201", status, out)
	}
	var v api.TemplateVersion
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Name != "web" || v.Seq != 1 || v.Source != "oci" || v.Env["GREETING"] != "hi" || v.Workdir != "/srv" || v.User != "sandbox" {
		t.Errorf("Got(version) = %+v; want web v1 from oci with the image's defaults", v)
	}
	status, out, _ = dev.Request(t, http.MethodPost, "/api/v1/templates/import?name=web", "application/x-tar", bytes.NewReader(ocitest.LayoutTar(t, img)))
	if status != http.StatusCreated || !strings.Contains(out, `"seq":2`) {
		t.Fatalf("Got(POST x-tar) = %d %s; want 201, version 2", status, out)
	}
	if n := len(env.Events(t, audit.TypeTemplateImported)); n != 2 {
		t.Errorf("Got(template.imported) = %d; want 2", n)
	}

	before := env.Counts(t)
	for _, tc := range []struct {
		name, ct string
		body     []byte
		status   int
		field    string
	}{
		{"dot-dot layer", "application/x-tar", ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.File("../x", "x")))), 422, "image"},
		{"absolute symlink escaping", "application/x-tar", ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.Symlink("s", "/../../etc/shadow")))), 422, "image"},
		{"oversized upload", "application/x-tar", make([]byte, 2<<20), 413, ""},
		{"a built-in's name", "application/x-tar", ocitest.DockerTar(t, img), 409, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad"
			if tc.status == 409 {
				name = "busybox"
			}
			status, out, _ := dev.Request(t, http.MethodPost, "/api/v1/templates/import?name="+name, tc.ct, bytes.NewReader(tc.body))
			if status != tc.status || (tc.field != "" && !strings.Contains(out, `"field":"`+tc.field+`"`)) {
				t.Fatalf("Got(POST) = %d %s; want %d naming %q", status, out, tc.status, tc.field)
			}
		})
	}
	status, out = dev.JSON(t, http.MethodPost, "/api/v1/templates/import", map[string]string{"name": "pulled", "image": "registry.example.test/team/tool:1"}, nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(out, "registry_not_allowed") {
		t.Errorf("Got(POST JSON of a registry not allowed) = %d %s; want 422 registry_not_allowed", status, out)
	}
	after := env.Counts(t)
	for _, table := range []string{"templates", "template_versions"} {
		if before[table] != after[table] {
			t.Errorf("Got(%s rows) = %d after refusals; want %d", table, after[table], before[table])
		}
	}
	if tn, vn := templateRows(t, env); tn != 1 || vn != 2 {
		t.Errorf("Got(rows) = %d templates, %d versions; want 1, 2", tn, vn)
	}
	// Another tenant sees none of it.
	other := env.Tenant(t, "other")
	var ov []templates.Version
	env.DB.Where("tenant_id = ?", other.ID).Find(&ov)
	if len(ov) != 0 {
		t.Errorf("Got(other tenant's versions) = %d; want 0", len(ov))
	}
}

// TestTemplateImportPage imports through the browser form and shows a
// refusal in place.
func TestTemplateImportPage(t *testing.T) {
	env := webtest.New(t, webtest.Options{TemplateMaxUploadBytes: 1 << 20})
	acme := env.Tenant(t, "acme")
	env.Member(t, acme, "dev@acme.test", tenants.RoleDeveloper)
	c := env.Login(t, "dev@acme.test")
	if status, page := c.GetPage(t, "/templates/import"); status != http.StatusOK || !strings.Contains(page, "Import an image") {
		t.Fatalf("Got(GET /templates/import) = %d; want the form", status)
	}
	bad := ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.File("../x", "x"))))
	ct, body := importForm(t, map[string]string{"name": "bad", "_csrf": c.CSRF(t)}, bad)
	status, page, _ := c.Request(t, http.MethodPost, "/templates/import", ct, body)
	if status != http.StatusUnprocessableEntity || !strings.Contains(page, "climbs out of the image root") {
		t.Fatalf("Got(POST a bad image) = %d; want 422 with the reason in place", status)
	}
	good := ocitest.DockerTar(t, ocitest.Image(t, nil, "", "", ocitest.Layer(t, ocitest.File("a", "a"))))
	ct, body = importForm(t, map[string]string{"name": "good", "_csrf": c.CSRF(t)}, good)
	req, _ := http.NewRequest(http.MethodPost, env.URL+"/templates/import", body)
	req.Header.Set("Content-Type", ct)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc, _ := url.Parse(resp.Header.Get("Location")); resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Path != "/templates" {
		t.Fatalf("Got(POST a good image) = %d to %s; want 303 to /templates", resp.StatusCode, resp.Header.Get("Location"))
	}
	if tn, vn := templateRows(t, env); tn != 1 || vn != 1 {
		t.Errorf("Got(rows) = %d, %d; want 1, 1", tn, vn)
	}
}
