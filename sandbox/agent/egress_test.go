package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

const testCA = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBATAKBggqhkjOPQQDAjAAMB4XDTI2MDEwMTAwMDAwMFoX\n-----END CERTIFICATE-----\n"

func TestInstallCA(t *testing.T) {
	tests := []struct {
		name       string
		bundle     string // the template's system bundle; "" means none
		wantBundle string
	}{
		{"template with a system bundle", "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----", systemCABundle},
		{"template without one", "", caFile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.bundle != "" {
				p := filepath.Join(root, systemCABundle)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(tc.bundle), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env, err := installCA(root, testCA)
			if err != nil {
				t.Fatalf("installCA() = %v", err)
			}
			for _, want := range []string{"SSL_CERT_FILE=" + tc.wantBundle, "REQUESTS_CA_BUNDLE=" + tc.wantBundle,
				"CURL_CA_BUNDLE=" + tc.wantBundle, "NODE_EXTRA_CA_CERTS=" + caFile} {
				if !slices.Contains(env, want) {
					t.Errorf("Got(env) = %q; want it to hold %q", env, want)
				}
			}
			b, err := os.ReadFile(filepath.Join(root, caFile))
			if err != nil || string(b) != testCA {
				t.Errorf("Got(%s) = %q, %v; want the CA", caFile, b, err)
			}
			if tc.bundle != "" {
				b, _ := os.ReadFile(filepath.Join(root, systemCABundle))
				if !strings.HasPrefix(string(b), tc.bundle+"\n") || !strings.HasSuffix(string(b), testCA) {
					t.Errorf("Got(system bundle) = %q; want the template's roots then the CA", b)
				}
			}
		})
	}
}

func TestInstallCARefusesNonPEM(t *testing.T) {
	_, err := installCA(t.TempDir(), "not a certificate")
	if !errors.Is(err, agentproto.ErrBadRequest) {
		t.Errorf("Got(installCA(garbage)) = %v; want ErrBadRequest", err)
	}
	env, err := installCA(t.TempDir(), "")
	if err != nil || env != nil {
		t.Errorf("Got(installCA(\"\")) = %q, %v; want nothing", env, err)
	}
}

func TestEgressEnv(t *testing.T) {
	env := sandboxEnv(egressEnv(nil))
	for _, want := range []string{"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
		"http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !slices.Contains(env, want) {
			t.Errorf("Got(env) = %q; want it to hold %q", env, want)
		}
	}
}
