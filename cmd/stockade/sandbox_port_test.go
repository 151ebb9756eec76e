package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestSandboxPort: `stockade sandbox port ID PORT` prints the port's URL on
// the server; --preview --ttl makes a preview link and prints it (the link
// is the server's /preview/<token>/, and the server lists it); a bad port
// or a --ttl without --preview is a usage error before any request; another
// tenant's sandbox is the server's 404. (The tunnel itself runs on a real
// VM in web's TestPortsVM.)
func TestSandboxPort(t *testing.T) {
	db := dbtest.SQLite(t)
	e := webtest.New(t, webtest.Options{DB: db})
	a, b := e.Tenant(t, "cli-ports-a"), e.Tenant(t, "cli-ports-b")
	sb := sandboxtest.Record(t, db, a.ID, "dev@cli-ports-a.test")
	aTok, bTok := e.Token(t, a, tenants.RoleDeveloper), e.Token(t, b, tenants.RoleAdmin)
	cli := func(token string, args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		err := sandboxCmd(context.Background(), append([]string{"port"}, args...),
			env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": token}), nil, &out, &errb)
		return out.String(), errb.String(), err
	}

	out, _, err := cli(aTok, sb.ID, "8000")
	if want := e.URL + "/api/v1/sandboxes/" + sb.ID + "/ports/8000/\n"; err != nil || out != want {
		t.Errorf("Got(port) = %q, %v; want %q", out, err, want)
	}
	out, errOut, err := cli(aTok, "--preview", "--ttl", "10m", sb.ID, "8000")
	if err != nil || !strings.HasPrefix(out, e.URL+"/preview/stkp_") || !strings.Contains(errOut, "revoke") {
		t.Fatalf("Got(port --preview) = %q, %q, %v; want a preview URL and how to revoke it", out, errOut, err)
	}
	var links int64
	db.Table("sandbox_preview_links").Where("tenant_id = ? AND sandbox_id = ? AND port = 8000", a.ID, sb.ID).Count(&links)
	if links != 1 {
		t.Errorf("Got(links stored) = %d; want 1", links)
	}

	for _, args := range [][]string{{sb.ID, "0"}, {sb.ID, "70000"}, {sb.ID}, {"--ttl", "1h", sb.ID, "8000"}} {
		_, errOut, err := cli(aTok, args...)
		var ee exitError
		if !errors.As(err, &ee) || ee != 2 || errOut == "" {
			t.Errorf("Got(port %q) = %v, %q; want usage error (exit 2) with a message", args, err, errOut)
		}
	}
	if _, _, err := cli(bTok, sb.ID, "8000"); err == nil || !strings.Contains(err.Error(), "404") && !strings.Contains(strings.ToLower(err.Error()), "not found") {
		t.Errorf("Got(port of another tenant's sandbox) = %v; want not found", err)
	}
	if _, _, err := cli(aTok, "--preview", sb.ID, "8000"); err != nil {
		t.Errorf("Got(second link) = %v; want one more link", err)
	}
}
