package oci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/hypervisor/image"
	"github.com/stockade-dev/stockade/sandbox/egress"
	"github.com/stockade-dev/stockade/sandbox/templates"
	"github.com/stockade-dev/stockade/sandbox/templates/oci"
	. "github.com/stockade-dev/stockade/sandbox/templates/oci/ocitest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/secrets"
)

var dev = audit.Actor{Kind: audit.ActorUser, ID: "u-1", Name: "dev@example.test"}

type importEnv struct {
	db      *gorm.DB
	im      *oci.Importer
	tenant  string
	dataDir string
	egress  *egress.Store
	secrets *secrets.Store
	audit   *audit.Log
}

// newImportEnv is the importer on SQLite with a real template registry,
// secrets store and egress gateway, whose tenant policy allows only
// allowHosts (127.0.0.1 reachable, as STOCKADE_EGRESS_ALLOW_CIDRS would).
func newImportEnv(t *testing.T, registries []string, allowHosts ...string) *importEnv {
	t.Helper()
	return newImportEnvOn(t, dbtest.SQLite(t), registries, allowHosts...)
}

func newImportEnvOn(t *testing.T, db *gorm.DB, registries []string, allowHosts ...string) *importEnv {
	t.Helper()
	st := tenants.NewStore(db, nil)
	tn, err := st.CreateTenant(context.Background(), audit.Actor{Kind: audit.ActorSystem, ID: "test"}, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	reg, err := templates.New(templates.Config{DB: db, DataDir: dataDir, Builtins: func() []image.Template { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.New(db, []byte("0123456789abcdef0123456789abcdef"), secrets.Config{})
	if err != nil {
		t.Fatal(err)
	}
	es := egress.NewStore(db)
	log := audit.NewLog(db, nil)
	var allow []egress.Rule
	for _, h := range allowHosts {
		allow = append(allow, egress.Rule{Domain: h})
	}
	gw, err := egress.New(egress.Config{
		Policies: egress.PoliciesFunc(func(ctx context.Context, tenantID string) (egress.Rules, int, error) {
			return egress.Rules{Default: egress.DefaultDeny, Allow: allow}, 1, nil
		}),
		Store: es, Audit: log, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	})
	if err != nil {
		t.Fatal(err)
	}
	im, err := oci.New(oci.Config{Templates: reg, Quota: st.Quota, Audit: log, ScratchDir: filepath.Join(dataDir, "template-imports"),
		MaxUpload: 64 << 20, Registries: registries, Gateway: gw, Secrets: sec})
	if err != nil {
		t.Fatal(err)
	}
	return &importEnv{db: db, im: im, tenant: tn.ID, dataDir: dataDir, egress: es, secrets: sec, audit: log}
}

// leftovers lists the files under the data dir's templates and scratch.
func (e *importEnv) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, d := range []string{"tenant-templates", "template-imports"} {
		filepath.WalkDir(filepath.Join(e.dataDir, d), func(p string, de os.DirEntry, err error) error {
			if err == nil && !de.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

func (e *importEnv) rows(t *testing.T) (templatesN, versionsN int64) {
	t.Helper()
	e.db.Model(&templates.Template{}).Where("deleted_at IS NULL").Count(&templatesN)
	e.db.Model(&templates.Version{}).Count(&versionsN)
	return
}

func (e *importEnv) upload(t *testing.T, archive []byte, tpl string) (templates.Version, error) {
	t.Helper()
	up, err := e.im.Receive(bytes.NewReader(archive))
	if err != nil {
		return templates.Version{}, err
	}
	defer up.Close()
	return e.im.Import(t.Context(), e.tenant, oci.Request{Name: tpl, Actor: dev, Upload: up})
}

// TestImportUpload on SQLite and PostgreSQL.
func TestImportUpload(t *testing.T) {
	for _, db := range dbtest.Databases(t) {
		t.Run(db.Name, func(t *testing.T) { testImportUpload(t, newImportEnvOn(t, db.DB, nil)) })
	}
}

func testImportUpload(t *testing.T, e *importEnv) {
	v, err := e.upload(t, DockerTar(t, goodImage(t)), "mine")
	if err != nil {
		t.Fatalf("Got(Import) = %v; want nil", err)
	}
	if v.State != templates.StateReady || v.Source != templates.SourceOCI || !strings.HasPrefix(v.SourceRef, "upload@sha256:") {
		t.Errorf("Got(version) = %s %s %s; want ready, oci, upload@sha256:…", v.State, v.Source, v.SourceRef)
	}
	want := templates.Defaults{Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "GREETING": "hello from the image"},
		User: oci.SandboxUser, Workdir: "/app"}
	if v.Defaults.User != want.User || v.Defaults.Workdir != want.Workdir || v.Defaults.Env["GREETING"] != want.Env["GREETING"] || len(v.Defaults.Env) != 2 {
		t.Errorf("Got(defaults) = %+v; want %+v (root mapped to the sandbox user)", v.Defaults, want)
	}
	var n int64
	e.db.Model(&audit.Event{}).Where("type = ?", audit.TypeTemplateImported).Count(&n)
	if n != 1 {
		t.Errorf("Got(template.imported events) = %d; want 1", n)
	}
	if left := e.leftovers(t); len(left) != 1 || !strings.HasSuffix(left[0], v.ID+".ext4") {
		t.Errorf("Got(files) = %v; want only the version's image", left)
	}
}

func TestImportRefusedLeavesNothing(t *testing.T) {
	e := newImportEnv(t, nil)
	one := Layer(t, File("a", "the real layer"))
	d1, _ := one.Digest()
	wrong := Rewrite(t, LayoutTar(t, Image(t, nil, "", "", one)), func(name string, b []byte) []byte {
		if strings.HasSuffix(name, d1.Hex) {
			return Compressed(t, Layer(t, File("a", "not it")))
		}
		return b
	})
	for _, tc := range []struct {
		name    string
		archive []byte
		rule    string
	}{
		{"wrong digest", wrong, "digest"},
		{"dot-dot", DockerTar(t, Image(t, nil, "", "", Layer(t, File("../x", "x")))), "path_escape"},
		{"absolute symlink escaping", DockerTar(t, Image(t, nil, "", "", Layer(t, Symlink("x", "/../../../etc/shadow")))), "symlink_escape"},
		{"write through an absolute symlink", DockerTar(t, Image(t, nil, "", "", Layer(t, Symlink("x", "/tmp")), Layer(t, File("x/y", "y")))), "symlink_parent"},
		{"not an image", Tar(t, File("hello.txt", "hi")), "image_format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.upload(t, tc.archive, "bad")
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Rule != tc.rule || errdefs.HTTPStatus(err) != http.StatusUnprocessableEntity {
				t.Fatalf("Got(Import) = %v; want a 422 refusal, rule %s", err, tc.rule)
			}
			if tn, vn := e.rows(t); tn != 0 || vn != 0 {
				t.Errorf("Got(rows) = %d templates, %d versions; want none", tn, vn)
			}
			if left := e.leftovers(t); len(left) != 0 {
				t.Errorf("Got(files) = %v; want none", left)
			}
		})
	}
	var n int64
	e.db.Model(&audit.Event{}).Where("type = ?", audit.TypeTemplateImportFailed).Count(&n)
	if n != 5 {
		t.Errorf("Got(template.import_failed events) = %d; want 5", n)
	}
}

func TestImportUploadTooLarge(t *testing.T) {
	e := newImportEnv(t, nil)
	_, err := e.im.Receive(bytes.NewReader(make([]byte, 64<<20+1)))
	if !errdefs.IsTooLarge(err) || errdefs.HTTPStatus(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("Got(Receive of 64 MiB + 1) = %v; want 413", err)
	}
	if left := e.leftovers(t); len(left) != 0 {
		t.Errorf("Got(files) = %v; want none", left)
	}
}

// serveRegistry runs go-containerregistry's registry on 127.0.0.1, with
// basic auth when user is set, and pushes img as repo:tag.
func serveRegistry(t *testing.T, user, pass string) (host string) {
	t.Helper()
	h := registry.New()
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host = strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host + "/team/tool:1")
	if err != nil {
		t.Fatal(err)
	}
	opts := []remote.Option{}
	if user != "" {
		opts = append(opts, remote.WithAuthFromKeychain(staticKeychain{user, pass}))
	}
	if err := remote.Write(ref, goodImage(t), opts...); err != nil {
		t.Fatal(err)
	}
	return host
}

func TestImportPull(t *testing.T) {
	host := serveRegistry(t, "", "")
	e := newImportEnv(t, []string{host}, "127.0.0.1")
	v, err := e.im.Import(t.Context(), e.tenant, oci.Request{Name: "pulled", Actor: dev, Image: host + "/team/tool:1"})
	if err != nil {
		t.Fatalf("Got(Import pull) = %v; want nil", err)
	}
	if !strings.HasPrefix(v.SourceRef, host+"/team/tool@sha256:") || v.Defaults.Workdir != "/app" {
		t.Errorf("Got(version) = %s, %+v; want the image's digest and defaults", v.SourceRef, v.Defaults)
	}
	// The pull went through the gateway, logged as the tenant's traffic.
	evs, err := e.egress.Events(t.Context(), e.tenant, egress.Filter{Decision: egress.DecisionAllow})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].VMID != egress.HostVM || evs[0].SandboxID != "template-import:pulled" {
		t.Errorf("Got(egress events) = %+v; want the pull's connections under template-import:pulled", evs)
	}
}

func TestImportPullRefused(t *testing.T) {
	host := serveRegistry(t, "", "")
	for _, tc := range []struct {
		name       string
		registries []string
		allow      []string
		image      string
		field      string
		rule       string
		detail     string
	}{
		{"registry not allowed", []string{"registry.example.test"}, []string{"127.0.0.1"}, host + "/team/tool:1", "image", "registry_not_allowed", "STOCKADE_TEMPLATE_REGISTRIES"},
		{"no registry allowed", nil, []string{"127.0.0.1"}, "docker.io/library/debian:12", "image", "registry_not_allowed", "none is allowed"},
		{"egress policy denies", []string{host}, nil, host + "/team/tool:1", "image", "pull", "denied"},
		{"no such image", []string{host}, []string{"127.0.0.1"}, host + "/team/none:1", "image", "not_found", "no such image"},
		{"not a reference", []string{host}, []string{"127.0.0.1"}, "UPPER CASE", "image", "reference", "not an image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newImportEnv(t, tc.registries, tc.allow...)
			_, err := e.im.Import(t.Context(), e.tenant, oci.Request{Name: "pulled", Actor: dev, Image: tc.image})
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Rule != tc.rule || !strings.Contains(fe.Detail, tc.detail) {
				t.Fatalf("Got(Import) = %v; want %s/%s naming %q", err, tc.field, tc.rule, tc.detail)
			}
			if tn, vn := e.rows(t); tn != 0 || vn != 0 {
				t.Errorf("Got(rows) = %d, %d; want none", tn, vn)
			}
			if tc.detail == "denied" {
				// Refused by the tenant's policy: logged and audited as its
				// sandboxes' refusals are.
				evs, err := e.egress.Events(t.Context(), e.tenant, egress.Filter{Decision: egress.DecisionDeny})
				if err != nil || len(evs) == 0 || evs[0].SandboxID != "template-import:pulled" || evs[0].VMID != egress.HostVM {
					t.Errorf("Got(denied egress events) = %+v, %v; want the pull's refusal", evs, err)
				}
				var n int64
				e.db.Model(&audit.Event{}).Where("type = ?", audit.TypeEgressDenied).Count(&n)
				if n == 0 {
					t.Errorf("Got(egress.denied events) = 0; want the refusal audited")
				}
			}
		})
	}
}

func TestImportPullCredentials(t *testing.T) {
	const pass = "s3cret-registry-password"
	host := serveRegistry(t, "robot", pass)
	e := newImportEnv(t, []string{host}, "127.0.0.1")
	ctx := t.Context()
	img := host + "/team/tool:1"
	// No credentials: the registry refuses.
	_, err := e.im.Import(ctx, e.tenant, oci.Request{Name: "priv", Actor: dev, Image: img})
	if fe := (*errdefs.FieldError)(nil); !errors.As(err, &fe) || fe.Field != "credentials_secret" {
		t.Fatalf("Got(Import without credentials) = %v; want a refusal naming credentials_secret", err)
	}
	// A secret scoped elsewhere is not sent.
	if _, err := e.secrets.Create(ctx, dev, e.tenant, secrets.NewSecret{Name: "ELSEWHERE", Value: "robot:" + pass, Hosts: []string{"registry.example.test"}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.im.Import(ctx, e.tenant, oci.Request{Name: "priv", Actor: dev, Image: img, CredentialsSecret: "ELSEWHERE"})
	if fe := (*errdefs.FieldError)(nil); !errors.As(err, &fe) || fe.Rule != "secret_hosts" {
		t.Fatalf("Got(Import with a secret of other hosts) = %v; want rule secret_hosts", err)
	}
	if _, err := e.im.Import(ctx, e.tenant, oci.Request{Name: "priv", Actor: dev, Image: img, CredentialsSecret: "MISSING"}); !errdefs.IsInvalid(err) {
		t.Fatalf("Got(Import with no such secret) = %v; want invalid", err)
	}
	if _, err := e.secrets.Create(ctx, dev, e.tenant, secrets.NewSecret{Name: "REGISTRY", Value: "robot:" + pass, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	v, err := e.im.Import(ctx, e.tenant, oci.Request{Name: "priv", Actor: dev, Image: img, CredentialsSecret: "REGISTRY"})
	if err != nil {
		t.Fatalf("Got(Import with the secret) = %v; want nil", err)
	}
	// The value is in no audit event and no egress event.
	var evs []audit.Event
	e.db.Find(&evs)
	for _, ev := range evs {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), pass) {
			t.Errorf("Got(audit %s) = %s; want no secret value", ev.Type, b)
		}
	}
	if strings.Contains(v.SourceRef, pass) {
		t.Errorf("Got(source ref) = %s; want no secret value", v.SourceRef)
	}
}

type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: k.user, Password: k.pass}, nil
}
