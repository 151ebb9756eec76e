package web_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stockade-dev/stockade/handlers/github"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/secrets"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestGitHubUnknownTenant is the enumeration attack on the public GitHub
// receiver: without any secret, probe /hooks/github/<slug> for slugs and
// learn which tenants exist (and which take deliveries) from the answers.
// An unknown slug, a tenant without a GitHub secret and a real tenant with
// a bad or missing signature must get byte-identical answers.
func TestGitHubUnknownTenant(t *testing.T) {
	env := webtest.New(t, webtest.Options{})
	real := env.Tenant(t, "gh-real")
	env.Tenant(t, "gh-unconfigured")
	admin := env.WithToken(env.Token(t, real, tenants.RoleAdmin))
	const secret = "hook-secret-of-gh-real"
	if _, err := env.Secrets.Create(context.Background(), audit.Actor{Kind: audit.ActorSystem, Name: "test"}, real.ID,
		secrets.NewSecret{Name: "GITHUB_HOOK", Value: secret, Hosts: []string{github.SecretHost}}); err != nil {
		t.Fatal(err)
	}
	if s, body := admin.JSON(t, http.MethodPut, "/api/v1/workflow-settings", map[string]string{"github_secret_name": "GITHUB_HOOK"}, nil); s != http.StatusOK {
		t.Fatalf("Got(PUT settings) = %d %s; want 200", s, body)
	}
	payload := []byte(`{"action":"opened","number":3,"repository":{"full_name":"acme/app"},"sender":{"login":"mallory"}}`)
	type answer struct {
		status      int
		contentType string
		body        string
	}
	deliver := func(slug, sig string, body []byte) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/hooks/github/"+slug, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-GitHub-Delivery", "probe-1")
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(raw)}
	}
	before := env.Counts(t)
	badSig := deliver("gh-real", github.Sign([]byte("a guess"), payload), payload)
	if badSig.status != http.StatusUnauthorized {
		t.Fatalf("Got(bad signature) = %+v; want 401", badSig)
	}
	tests := []struct {
		name string
		slug string
		sig  string
		body []byte
		want answer
	}{
		{"unknown tenant, some signature", "gh-nobody", github.Sign([]byte(secret), payload), payload, badSig},
		{"unknown tenant, no signature", "gh-nobody", "", payload, badSig},
		{"tenant without a GitHub secret", "gh-unconfigured", github.Sign([]byte(secret), payload), payload, badSig},
		{"real tenant, no signature", "gh-real", "", payload, badSig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deliver(tt.slug, tt.sig, tt.body); got != tt.want {
				t.Errorf("Got(POST /hooks/github/%s) = %+v; want the same answer as a real tenant's: %+v", tt.slug, got, tt.want)
			}
		})
	}
	env.Unchanged(t, before)
}
