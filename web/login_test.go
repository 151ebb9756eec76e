package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/web/webtest"
)

// claimMutator lets one Env's development provider misbehave on demand.
type claimMutator struct {
	mu sync.Mutex
	f  func(map[string]any)
}

func (m *claimMutator) set(f func(map[string]any)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.f = f
}

func (m *claimMutator) apply(c map[string]any) {
	m.mu.Lock()
	f := m.f
	m.mu.Unlock()
	if f != nil {
		f(c)
	}
}

const (
	sessionIdle     = 30 * time.Minute
	sessionAbsolute = 2 * time.Hour
)

// TestLogin runs the whole OIDC flow through the server against the real
// development provider over HTTP, on SQLite and PostgreSQL.
func TestLogin(t *testing.T) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			clock := clockwork.NewFakeClockAt(time.Now())
			mut := &claimMutator{}
			env := webtest.New(t, webtest.Options{DB: d.DB, Clock: clock, MutateClaims: mut.apply,
				SessionIdle: sessionIdle, SessionAbsolute: sessionAbsolute})
			acme := env.TenantNamed(t, "acme-corp", "Acme Corporation")
			env.Member(t, acme, "dev@acme.test", tenants.RoleAdmin)

			t.Run("lands on the dashboard", func(t *testing.T) { testLoginDashboard(t, env, acme) })
			t.Run("rejects", func(t *testing.T) { testLoginRejects(t, env, mut) })
			t.Run("logout ends the session", func(t *testing.T) { testLogout(t, env) })
			t.Run("new session id at login", func(t *testing.T) { testSessionFixation(t, env) })
			t.Run("idle expiry", func(t *testing.T) { testIdleExpiry(t, env, clock) })
			t.Run("absolute expiry", func(t *testing.T) { testAbsoluteExpiry(t, env, clock) })
			t.Run("invitation activates at first login", func(t *testing.T) { testInvitationActivates(t, env) })
			t.Run("two tenants: explicit choice", func(t *testing.T) { testChooseTenant(t, env, acme) })
		})
	}
}

func testLoginDashboard(t *testing.T, env *webtest.Env, acme tenants.Tenant) {
	c := env.Anonymous()
	resp, err := c.LoginFlow("dev@acme.test")
	if err != nil {
		t.Fatalf("LoginFlow: %v", err)
	}
	status, body, at := finish(t, resp)
	if status != http.StatusOK || at.Path != "/" {
		t.Fatalf("Got(login ends at) = %d %s; want 200 /", status, at.Path)
	}
	if h1 := webtest.ParseHTML(t, body).Text("h1"); len(h1) == 0 || h1[0] != acme.Name {
		t.Errorf("Got(dashboard h1) = %q; want [%q]", h1, acme.Name)
	}
	if c.Session() == "" {
		t.Errorf("Got(session cookie) = \"\"; want a session")
	}
	if s, m := me(t, c); s != http.StatusOK || deref(m.Tenant) != acme.Slug || deref(m.Role) != "admin" || m.User == nil || m.User.Email != "dev@acme.test" {
		t.Errorf("Got(/api/v1/me) = %d %+v; want 200 dev@acme.test admin of %s", s, m, acme.Slug)
	}
	evs := env.Events(t, audit.TypeLogin)
	if len(evs) == 0 || evs[len(evs)-1].ActorName != "dev@acme.test" || evs[len(evs)-1].TenantID != acme.ID {
		t.Errorf("Got(last auth.login) = %+v; want one by dev@acme.test in %s", evs, acme.Slug)
	}
}

// testLoginRejects: every tampered or misbehaving step of the flow ends in
// 401, an auth.login_failed event naming the reason, and no session.
func testLoginRejects(t *testing.T, env *webtest.Env, mut *claimMutator) {
	const email = "dev@acme.test"
	callback := func(t *testing.T, mutate func(map[string]any), edit func(url.Values)) (*webtest.Client, string) {
		c := env.Anonymous()
		cb, err := c.CallbackURL(email)
		if err != nil {
			t.Fatalf("CallbackURL: %v", err)
		}
		u, err := url.Parse(cb)
		if err != nil || u.Query().Get("code") == "" {
			t.Fatalf("Got(callback URL) = %q; want one with a code", cb)
		}
		if edit != nil {
			q := u.Query()
			edit(q)
			u.RawQuery = q.Encode()
		}
		mut.set(mutate)
		t.Cleanup(func() { mut.set(nil) })
		return c, u.String()
	}
	tests := []struct {
		name   string
		mutate func(map[string]any)
		edit   func(url.Values)
		// replay visits the callback once with a copy of the flow cookie
		// first, so the second visit redeems a used code.
		replay bool
		reason string
	}{
		{name: "tampered state", edit: func(q url.Values) { q.Set("state", q.Get("state")+"x") }, reason: "state mismatch"},
		{name: "replayed code", replay: true, reason: "code exchange"},
		{name: "wrong nonce", mutate: func(c map[string]any) { c["nonce"] = "not-the-nonce" }, reason: "nonce mismatch"},
		{name: "wrong audience", mutate: func(c map[string]any) { c["aud"] = "another-client" }, reason: "audience"},
		{name: "expired token", mutate: func(c map[string]any) {
			iat := c["iat"].(int64)
			c["iat"], c["exp"] = iat-3600, iat-1800
		}, reason: "expired"},
		{name: "unknown issuer", mutate: func(c map[string]any) { c["iss"] = "https://idp.evil.example" }, reason: "issued by a different provider"},
		{name: "provider error", edit: func(q url.Values) {
			q.Del("code")
			q.Set("error", "access_denied")
		}, reason: "provider returned an error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, cb := callback(t, tc.mutate, tc.edit)
			if tc.replay {
				flowCookie := c.Cookie("stockade_login")
				if resp, _ := visit(t, c, cb); resp.StatusCode != http.StatusSeeOther {
					t.Fatalf("Got(first visit of the callback) = %d; want 303", resp.StatusCode)
				}
				// The attacker replays the code with the victim's flow cookie.
				c = env.Anonymous()
				c.SetCookie("stockade_login", flowCookie)
			}
			before := env.Counts(t)
			failed := len(env.Events(t, audit.TypeLoginFailed))

			resp, body := visit(t, c, cb)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("Got(callback status) = %d; want 401", resp.StatusCode)
			}
			if !strings.Contains(body, "Sign-in did not complete") {
				t.Errorf("Got(callback page) = %.200q; want the sign-in failure message", body)
			}
			for _, ck := range resp.Cookies() {
				if ck.Name == webtest.SessionCookieName && ck.Value != "" {
					t.Errorf("Got(Set-Cookie) = %s; want no session cookie", ck)
				}
			}
			after := env.Counts(t)
			for _, table := range []string{"sessions", "users", "memberships"} {
				if after[table] != before[table] {
					t.Errorf("Got(rows in %s) = %d; want %d (unchanged)", table, after[table], before[table])
				}
			}
			evs := env.Events(t, audit.TypeLoginFailed)
			if len(evs) != failed+1 {
				t.Fatalf("Got(auth.login_failed events) = %d; want %d", len(evs), failed+1)
			}
			last := evs[len(evs)-1]
			if reason, _ := last.Details["reason"].(string); !strings.Contains(reason, tc.reason) {
				t.Errorf("Got(reason) = %q; want it to contain %q", reason, tc.reason)
			}
			if last.Outcome != audit.OutcomeFailure || last.Code != "SA1001W" {
				t.Errorf("Got(event outcome, code) = %s, %s; want failure, SA1001W", last.Outcome, last.Code)
			}
			if s, _ := me(t, c); s != http.StatusUnauthorized {
				t.Errorf("Got(/api/v1/me after the failed login) = %d; want 401", s)
			}
		})
	}
}

func testLogout(t *testing.T, env *webtest.Env) {
	c := env.Login(t, "dev@acme.test")
	old := c.Session()
	logouts := len(env.Events(t, audit.TypeLogout))
	status, _, hdr := c.Post(t, "/logout", nil)
	if status != http.StatusSeeOther || hdr.Get("Location") != "/login" {
		t.Fatalf("Got(POST /logout) = %d %s; want 303 /login", status, hdr.Get("Location"))
	}
	if c.Session() != "" {
		t.Errorf("Got(session cookie after logout) = %q; want it cleared", c.Session())
	}
	if n := len(env.Events(t, audit.TypeLogout)); n != logouts+1 {
		t.Errorf("Got(auth.logout events) = %d; want %d", n, logouts+1)
	}
	// The old cookie, replayed from elsewhere, no longer works.
	thief := env.Anonymous()
	thief.SetCookie(webtest.SessionCookieName, old)
	if s, _ := me(t, thief); s != http.StatusUnauthorized {
		t.Errorf("Got(/api/v1/me with the old cookie) = %d; want 401", s)
	}
	status, _, hdr = thief.Request(t, http.MethodGet, "/", "", nil)
	if !loginRedirect(status, hdr) {
		t.Errorf("Got(GET / with the old cookie) = %d %s; want 303 to /login", status, hdr.Get("Location"))
	}
}

func testSessionFixation(t *testing.T, env *webtest.Env) {
	t.Run("planted garbage", func(t *testing.T) {
		c := env.Anonymous()
		c.SetCookie(webtest.SessionCookieName, "planted-by-an-attacker")
		if _, err := c.LoginFlow("dev@acme.test"); err != nil {
			t.Fatal(err)
		}
		if got := c.Session(); got == "" || got == "planted-by-an-attacker" {
			t.Errorf("Got(session after login) = %q; want a new one", got)
		}
		if s, m := me(t, c); s != http.StatusOK || m.User == nil || m.User.Email != "dev@acme.test" {
			t.Errorf("Got(/api/v1/me) = %d %+v; want dev@acme.test", s, m)
		}
	})
	t.Run("planted live session", func(t *testing.T) {
		env.Member(t, mustTenant(t, env, "acme-corp"), "mallory@acme.test", tenants.RoleDeveloper)
		planted := env.Login(t, "mallory@acme.test").Session()
		victim := env.Anonymous()
		victim.SetCookie(webtest.SessionCookieName, planted)
		if _, err := victim.LoginFlow("dev@acme.test"); err != nil {
			t.Fatal(err)
		}
		if got := victim.Session(); got == "" || got == planted {
			t.Errorf("Got(session after login) = %q; want a new one, not the planted %q", got, planted)
		}
		if s, m := me(t, victim); s != http.StatusOK || m.User == nil || m.User.Email != "dev@acme.test" {
			t.Errorf("Got(/api/v1/me of the victim) = %d %+v; want dev@acme.test", s, m)
		}
		// The planted session never becomes the victim's: it is gone.
		attacker := env.Anonymous()
		attacker.SetCookie(webtest.SessionCookieName, planted)
		if s, m := me(t, attacker); s == http.StatusOK && m.User != nil && m.User.Email == "dev@acme.test" {
			t.Errorf("Got(/api/v1/me with the planted cookie) = dev@acme.test; want the victim's identity out of reach")
		}
	})
}

func mustTenant(t *testing.T, env *webtest.Env, slug string) tenants.Tenant {
	t.Helper()
	tn, err := env.Store.TenantBySlug(t.Context(), slug)
	if err != nil {
		t.Fatalf("TenantBySlug(%s): %v", slug, err)
	}
	return tn
}

func testIdleExpiry(t *testing.T, env *webtest.Env, clock *clockwork.FakeClock) {
	c := env.Login(t, "dev@acme.test")
	// Active use keeps the session alive past the idle limit in total.
	for i, step := range []time.Duration{sessionIdle - 5*time.Minute, sessionIdle - 5*time.Minute} {
		clock.Advance(step)
		if s, _ := me(t, c); s != http.StatusOK {
			t.Fatalf("Got(/api/v1/me after active step %d) = %d; want 200", i, s)
		}
	}
	clock.Advance(sessionIdle + time.Minute)
	if s, _ := me(t, c); s != http.StatusUnauthorized {
		t.Errorf("Got(/api/v1/me after %s idle) = %d; want 401", sessionIdle+time.Minute, s)
	}
	status, _, hdr := c.Request(t, http.MethodGet, "/", "", nil)
	if !loginRedirect(status, hdr) {
		t.Errorf("Got(GET / after idle expiry) = %d %s; want 303 to /login", status, hdr.Get("Location"))
	}
}

func testAbsoluteExpiry(t *testing.T, env *webtest.Env, clock *clockwork.FakeClock) {
	c := env.Login(t, "dev@acme.test")
	step := 25 * time.Minute // always under the idle limit
	var elapsed time.Duration
	for elapsed+step < sessionAbsolute {
		clock.Advance(step)
		elapsed += step
		if s, _ := me(t, c); s != http.StatusOK {
			t.Fatalf("Got(/api/v1/me after %s of activity) = %d; want 200", elapsed, s)
		}
	}
	clock.Advance(step)
	elapsed += step
	if s, _ := me(t, c); s != http.StatusUnauthorized {
		t.Errorf("Got(/api/v1/me after %s of activity, past the %s absolute limit) = %d; want 401", elapsed, sessionAbsolute, s)
	}
}

func testInvitationActivates(t *testing.T, env *webtest.Env) {
	beta := env.TenantNamed(t, "beta-labs", "Beta Labs")
	m := env.Invite(t, beta, "Newbie@Beta.test", tenants.RoleDeveloper)
	if m.Active() {
		t.Fatalf("Got(membership active before first login) = true; want false")
	}
	c := env.Anonymous()
	resp, err := c.LoginFlow("newbie@beta.test")
	if err != nil {
		t.Fatal(err)
	}
	status, body, at := finish(t, resp)
	if status != http.StatusOK || at.Path != "/" {
		t.Fatalf("Got(login ends at) = %d %s; want 200 /", status, at.Path)
	}
	if h1 := webtest.ParseHTML(t, body).Text("h1"); len(h1) == 0 || h1[0] != "Beta Labs" {
		t.Errorf("Got(dashboard h1) = %q; want [Beta Labs]", h1)
	}
	if got := env.Membership(t, m.ID); !got.Active() {
		t.Errorf("Got(membership active after first login) = false; want true (%+v)", got)
	}
	if s, me := me(t, c); s != http.StatusOK || deref(me.Role) != "developer" || deref(me.Tenant) != "beta-labs" {
		t.Errorf("Got(/api/v1/me) = %d %+v; want developer of beta-labs", s, me)
	}
	found := false
	for _, e := range env.Events(t, audit.TypeMemberActivated) {
		found = found || (e.TargetID == m.ID && e.TenantID == beta.ID)
	}
	if !found {
		t.Errorf("Got(member.activated for %s) = none; want one", m.ID)
	}
}

func testChooseTenant(t *testing.T, env *webtest.Env, acme tenants.Tenant) {
	gamma := env.TenantNamed(t, "gamma-works", "Gamma Works")
	delta := env.TenantNamed(t, "delta-corp", "Delta Corp")
	env.Member(t, acme, "multi@example.test", tenants.RoleAuditor)
	env.Member(t, gamma, "multi@example.test", tenants.RoleBilling)
	env.Member(t, delta, "someone-else@example.test", tenants.RoleAdmin)

	c := env.Anonymous()
	resp, err := c.LoginFlow("multi@example.test")
	if err != nil {
		t.Fatal(err)
	}
	status, body, at := finish(t, resp)
	if status != http.StatusOK || at.Path != "/tenants/choose" {
		t.Fatalf("Got(login ends at) = %d %s; want 200 /tenants/choose", status, at.Path)
	}
	for _, name := range []string{acme.Name, gamma.Name} {
		if !strings.Contains(body, name) {
			t.Errorf("Got(chooser) lacks %q; want both tenants listed", name)
		}
	}
	if strings.Contains(body, delta.Name) {
		t.Errorf("Got(chooser) lists %q; want only the user's tenants", delta.Name)
	}
	// No silent default: nothing tenant-scoped works until a choice.
	s, who := me(t, c)
	if m := who; s != http.StatusOK || m.User == nil || m.Tenant != nil || m.Role != nil {
		t.Fatalf("Got(/api/v1/me before choosing) = %d tenant %s role %s; want 200 with none", s, deref(m.Tenant), deref(m.Role))
	}
	if s, _, hdr := c.Request(t, http.MethodGet, "/audit", "", nil); s != http.StatusSeeOther || hdr.Get("Location") != "/tenants/choose" {
		t.Errorf("Got(GET /audit before choosing) = %d %s; want 303 /tenants/choose", s, hdr.Get("Location"))
	}
	if s, b, hdr := c.Request(t, http.MethodGet, "/api/v1/members", "", nil); s != http.StatusForbidden {
		t.Errorf("Got(GET /api/v1/members before choosing) = %d; want 403", s)
	} else if p := webtest.Problem(t, hdr, b); !strings.Contains(p.Detail, "no tenant selected") {
		t.Errorf("Got(problem detail) = %q; want it to say no tenant is selected", p.Detail)
	}

	for _, slug := range []string{delta.Slug, "no-such-tenant"} {
		before := env.Counts(t)
		if s, _, _ := c.Post(t, "/tenant/switch", url.Values{"slug": {slug}}); s != http.StatusNotFound {
			t.Errorf("Got(switch to %s) = %d; want 404", slug, s)
		}
		env.Unchanged(t, before)
		if _, m := me(t, c); m.Tenant != nil {
			t.Errorf("Got(tenant after switching to %s) = %s; want none", slug, *m.Tenant)
		}
	}
	for _, want := range []struct {
		tn   tenants.Tenant
		role string
	}{{gamma, "billing"}, {acme, "auditor"}} {
		s, _, hdr := c.Post(t, "/tenant/switch", url.Values{"slug": {want.tn.Slug}})
		if s != http.StatusSeeOther || hdr.Get("Location") != "/" {
			t.Fatalf("Got(switch to %s) = %d %s; want 303 /", want.tn.Slug, s, hdr.Get("Location"))
		}
		_, page := c.GetPage(t, "/")
		if h1 := webtest.ParseHTML(t, page).Text("h1"); len(h1) == 0 || h1[0] != want.tn.Name {
			t.Errorf("Got(dashboard h1 after switching) = %q; want [%q]", h1, want.tn.Name)
		}
		if _, m := me(t, c); deref(m.Tenant) != want.tn.Slug || deref(m.Role) != want.role {
			t.Errorf("Got(/api/v1/me) = %s %s; want %s %s", deref(m.Tenant), deref(m.Role), want.tn.Slug, want.role)
		}
	}
	found := false
	for _, e := range env.Events(t, audit.TypeTenantSelected) {
		found = found || (e.TenantID == gamma.ID && e.ActorID == who.User.ID)
	}
	if !found {
		t.Errorf("Got(auth.tenant_selected in %s) = none; want one", gamma.Slug)
	}
}
