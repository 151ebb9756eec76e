package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/handlers/api"
	"github.com/stockade-dev/stockade/hypervisor/hypervisortest"
	"github.com/stockade-dev/stockade/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

// TestServeOneServerPerInstallation starts `stockade serve` with a sandbox
// running in a real VM, then a second `stockade serve` on the same
// installation. With SQLite (the same data directory) the second refuses
// at once, naming the holder; with PostgreSQL it is a second replica: it
// serves beside the first, exactly one of them leads, and it never touches
// the first's VM. Either way the first's sandbox keeps running. Once the
// first stops cleanly, a new server starts without waiting for the lease
// to expire.
func TestServeOneServerPerInstallation(t *testing.T) {
	shared := sandboxtest.NeedVMs(t)
	kinds := []string{"sqlite"}
	if dsn := os.Getenv(dbtest.EnvPostgres); dsn != "" {
		kinds = append(kinds, "postgres")
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set: CI must run this on PostgreSQL too", dbtest.EnvPostgres)
	} else {
		t.Logf("%s is not set: SQLite only", dbtest.EnvPostgres)
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			dir := leaseDataDir(t, shared)
			vars := map[string]string{"STOCKADE_DATA_DIR": dir, "STOCKADE_DOMAIN_TYPE": "qemu", "STOCKADE_PROBE_INTERVAL": "0"}
			if kind == "postgres" {
				vars["STOCKADE_DB"] = freshPostgres(t)
			}
			with := func(addr string) func(string) string {
				m := map[string]string{"STOCKADE_ADDR": addr}
				for k, v := range vars {
					m[k] = v
				}
				return env(m)
			}
			if _, _, err := cli(t, with(""), "tenant", "create", "lease", "--admin", "ann@lease.test"); err != nil {
				t.Fatal(err)
			}
			out, _, err := cli(t, with(""), "token", "create", "--tenant", "lease", "--role", "admin")
			if err != nil {
				t.Fatal(err)
			}
			token := strings.TrimSpace(out)
			destroyLeftovers(t, vars["STOCKADE_DB"], dir)

			first := startServe(t, with(freeAddr(t)))
			api := func(method, path, body string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(method, first.base+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var sb struct {
				ID    string `json:"id"`
				VMID  string `json:"vm_id"`
				State string `json:"state"`
			}
			// Removed by the test at its end; a failure on the way leaves them to
			// destroyLeftovers.
			s, b := api(http.MethodPost, "/api/v1/sandboxes", `{"template":"busybox","memory_mib":64}`)
			if err := json.Unmarshal([]byte(b), &sb); s != http.StatusCreated || err != nil || sb.State != "running" {
				t.Fatalf("Got(POST /api/v1/sandboxes) = %d %s; want 201 running", s, b)
			}

			if kind == "postgres" {
				// Replicas: the second server on the same database starts and
				// serves beside the first, never touching its VM; one of the two
				// leads.
				second := startServe(t, with(freeAddr(t)))
				r1, r2 := readyz(t, first.base), readyz(t, second.base)
				if r1 == nil || r2 == nil || r1.Replicas != 2 || r1.Replica == r2.Replica || r1.Leader == r2.Leader {
					t.Errorf("Got(replication) = %+v and %+v; want two replicas, exactly one leader", r1, r2)
				}
				if r1 != nil && r2 != nil && (r1.VMLeasesHeld != 1 || r2.VMLeasesHeld != 0) {
					t.Errorf("Got(vm leases held) = %d and %d; want the first's VM the first's only", r1.VMLeasesHeld, r2.VMLeasesHeld)
				}
				defer second.stop(t)
			} else {
				// The second server on the same installation refuses before it
				// touches any VM, and says who holds it.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				var logs bytes.Buffer
				err = run(ctx, []string{"serve"}, with(freeAddr(t)), io.Discard, &logs)
				host, _ := os.Hostname()
				if err == nil || !errors.Is(err, tenants.ErrLeaseHeld) {
					t.Fatalf("Got(second serve) = %v; want a refusal: the installation lease is held", err)
				}
				for _, want := range []string{host, fmt.Sprintf("pid %d", os.Getpid()), "serving since", "--wait-lease"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Got(refusal) = %q; want it to name %q", err, want)
					}
				}
				if strings.Contains(logs.String(), "reconcile") || strings.Contains(logs.String(), "libvirt host connected") {
					t.Errorf("the refused server reached libvirt: %s", logs.String())
				}
			}
			// The first server's sandbox runs on, in the same VM.
			var res struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			}
			s, b = api(http.MethodPost, "/api/v1/sandboxes/"+sb.ID+"/exec", `{"cmd":["echo","still here"]}`)
			if err := json.Unmarshal([]byte(b), &res); s != http.StatusOK || err != nil || res.Stdout != "still here\n" {
				t.Errorf("Got(exec after the second server's try) = %d %s; want still here", s, b)
			}
			var vm struct {
				State          string `json:"state"`
				AgentConnected bool   `json:"agent_connected"`
			}
			s, b = api(http.MethodGet, "/api/v1/vms/"+sb.VMID, "")
			if err := json.Unmarshal([]byte(b), &vm); s != http.StatusOK || err != nil || vm.State != "running" || !vm.AgentConnected {
				t.Errorf("Got(the first server's VM) = %d %s; want running, its agent connected", s, b)
			}

			// Stopped cleanly, the first frees the lease: the next starts now.
			api(http.MethodDelete, "/api/v1/sandboxes/"+sb.ID, "")
			api(http.MethodDelete, "/api/v1/vms/"+sb.VMID, "")
			first.stop(t)
			next := startServe(t, with(freeAddr(t)))
			next.stop(t)
		})
	}
}

// readyz is a server's replication detail (nil without one).
func readyz(t *testing.T, base string) *api.Replication {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	defer resp.Body.Close()
	var st api.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return st.Replication
}

// leaseDataDir is a data directory of its own (database, key, recordings)
// that shares the built guest image, traversable by QEMU.
func leaseDataDir(t *testing.T, shared string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "stockade-lease-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shared, "images"), filepath.Join(dir, "images")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// freshPostgres creates a database on the test server and returns its DSN;
// it is dropped at the end.
func freshPostgres(t *testing.T) string {
	t.Helper()
	admin := os.Getenv(dbtest.EnvPostgres)
	db, err := tenants.Open(context.Background(), admin, "")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "stockade_lease_" + hex.EncodeToString(b)
	if err := db.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

type served struct {
	base   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// startServe runs `stockade serve` until stop, once /readyz says ready.
func startServe(t *testing.T, getenv func(string) string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{base: "http://" + getenv("STOCKADE_ADDR"), cancel: cancel, done: make(chan error, 1)}
	logs := &lockedBuffer{}
	go func() { s.done <- run(ctx, []string{"serve"}, getenv, io.Discard, logs) }()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("serve at %s logged:\n%s", s.base, tail(logs, 16<<10))
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("serve ended before it was ready: %v", err)
		default:
		}
		if resp, err := http.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("serve never became ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *served) stop(t *testing.T) {
	s.once.Do(func() {
		s.cancel()
		if err := <-s.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}

// destroyLeftovers destroys, at the end, any domain of the installation
// still there, and fails the test if there was one.
func destroyLeftovers(t *testing.T, dsn, dir string) {
	t.Helper()
	db, err := tenants.Open(context.Background(), dsn, dir)
	if err != nil {
		t.Fatal(err)
	}
	install, err := tenants.NewStore(db, nil).InstallationID(context.Background())
	if sqlDB, derr := db.DB(); derr == nil {
		sqlDB.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		leaked, err := hypervisortest.DestroyInstallation(ctx, hypervisortest.SystemURI, install)
		for _, name := range leaked {
			t.Errorf("leaked domain %s: destroyed it", name)
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// tail is the end of a server's log, at most n bytes.
func tail(l *lockedBuffer, n int) string {
	s := l.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
