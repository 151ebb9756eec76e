package authn

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSafeReturnTo(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "/"},
		{"/", "/"},
		{"/sandboxes", "/sandboxes"},
		{"/sandboxes/42?tab=terminal#top", "/sandboxes/42?tab=terminal#top"},
		{"/t/acme/audit?from=2026-01-01&to=2026-02-01", "/t/acme/audit?from=2026-01-01&to=2026-02-01"},
		{"//evil.example", "/"},
		{"//evil.example/path", "/"},
		{"/\\evil.example", "/"},
		{"/a\\b", "/"},
		{"\\\\evil.example", "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(1)", "/"},
		{"evil.example", "/"},
		{"sandboxes", "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/ok\r\nSet-Cookie: x=y", "/"},
		{"/" + strings.Repeat("a", maxReturnTo), "/"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.40q", tt.in), func(t *testing.T) {
			if got := SafeReturnTo(tt.in); got != tt.want {
				t.Errorf("Got(SafeReturnTo(%q)) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFlowSeal(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := flow{State: "s", Nonce: "n", Verifier: "v", ReturnTo: "/x", Expires: now.Add(flowTTL).Unix()}
	sealed, err := sealFlow(key, f)
	if err != nil {
		t.Fatal(err)
	}
	payload, sig, _ := strings.Cut(sealed, ".")
	other, _ := sealFlow(key, flow{State: "attacker", Nonce: "n", Verifier: "v", Expires: f.Expires})
	otherPayload, _, _ := strings.Cut(other, ".")
	tests := []struct {
		name  string
		value string
		now   time.Time
		ok    bool
	}{
		{"valid", sealed, now, true},
		{"just before expiry", sealed, now.Add(flowTTL - time.Second), true},
		{"expired", sealed, now.Add(flowTTL), false},
		{"other key", mustSeal(t, []byte(strings.Repeat("x", 32)), f), now, false},
		{"payload swapped", otherPayload + "." + sig, now, false},
		{"no signature", payload, now, false},
		{"empty", "", now, false},
		{"garbage", "!!!.???", now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openFlow(key, tt.value, tt.now)
			if tt.ok {
				if err != nil || got != f {
					t.Errorf("Got(openFlow) = %+v, %v; want %+v, nil", got, err, f)
				}
				return
			}
			if !errors.Is(err, errFlowCookie) {
				t.Errorf("Got(openFlow error) = %v; want a flow cookie error", err)
			}
		})
	}
}

func mustSeal(t *testing.T, key []byte, f flow) string {
	t.Helper()
	s, err := sealFlow(key, f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFlowCookieAttributes checks what Begin sets and that Finish clears it even on failure.
func TestFlowCookieAttributes(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[secure], func(t *testing.T) {
			e := newEnv(t, envOptions{secureCookies: secure})
			rec := httptest.NewRecorder()
			authURL, err := e.rp.Begin(rec, httptest.NewRequest(http.MethodGet, "/login", nil), "/next")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(authURL, e.issuer+"/authorize?") || !strings.Contains(authURL, "code_challenge_method=S256") ||
				!strings.Contains(authURL, "nonce=") || !strings.Contains(authURL, "state=") {
				t.Errorf("Got(authURL) = %s; want the issuer's authorize endpoint with state, nonce and S256 challenge", authURL)
			}
			cookies := rec.Result().Cookies()
			if len(cookies) != 1 {
				t.Fatalf("Got(len(cookies)) = %d; want 1", len(cookies))
			}
			c := cookies[0]
			if c.Name != "stockade_login" || c.Path != "/" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode ||
				c.MaxAge != 600 || c.Secure != secure {
				t.Errorf("Got(cookie) = %+v; want stockade_login, Path=/, HttpOnly, Lax, Max-Age 600, Secure %v", c, secure)
			}

			rec = httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/auth/callback?state=wrong&code=x", nil)
			req.AddCookie(c)
			if _, _, err := e.rp.Finish(rec, req); err == nil {
				t.Fatal("Got(Finish with wrong state) = nil; want an error")
			}
			cleared := rec.Result().Cookies()
			if len(cleared) != 1 || cleared[0].Name != "stockade_login" || cleared[0].MaxAge >= 0 || cleared[0].Path != "/" {
				t.Errorf("Got(cookies after Finish) = %+v; want stockade_login deleted", cleared)
			}
		})
	}
}
