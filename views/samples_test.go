package views

import (
	"time"

	"github.com/a-h/templ"
)

// sampleCSRF is the token every sample page carries; tests look for it in forms.
const sampleCSRF = "csrf-sample-token-5f2a9c"

// samplePage is one page rendered with realistic data, shared by the render
// tests and the preview server.
type samplePage struct {
	Name  string // also the preview path: /preview/<Name>
	Title string // text the page must show
	Page  Page
	View  templ.Component
}

func sampleTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err) // constant inputs: a typo here is a bug in the test
	}
	return t
}

func samplePageModel(title, active string) Page {
	return Page{
		Title:  title,
		Active: active,
		User:   User{Email: "ada@acme.test", Name: "Ada Lovelace"},
		Tenant: Tenant{Slug: "acme", Name: "Acme Corp"},
		Role:   "admin",
		Tenants: []TenantChoice{
			{Slug: "acme", Name: "Acme Corp", Role: "admin", Current: true},
			{Slug: "globex", Name: "Globex Research", Role: "developer"},
		},
		IsOperator:   true,
		CSRF:         sampleCSRF,
		DevIdP:       true,
		RequestID:    "req-01JDX4T6Q9",
		AssetVersion: "3f9c2a1b7d0e",
		Nav:          sampleNav(),
	}
}

// sampleNav is an admin's and operator's navigation (handlers build the
// real one from the route table).
func sampleNav() Nav {
	it := func(key, label, href string) NavItem { return NavItem{Key: key, Label: label, Href: href} }
	return Nav{
		Main: []NavItem{it(NavDashboard, "Dashboard", "/"), it(NavSandboxes, "Sandboxes", "/sandboxes"), it(NavTerminals, "Terminals", "/terminals"),
			it(NavWorkflows, "Workflows", "/workflows"), it(NavRuns, "Runs", "/runs"), it(NavVMs, "VMs", "/vms"), it(NavPolicy, "Policy", "/policy"),
			it(NavEgress, "Egress", "/egress"), it(NavUsage, "Usage", "/usage"), it(NavCompliance, "Compliance", "/compliance"), it(NavAudit, "Audit", "/audit")},
		Hub: it(NavSettings, "Settings", "/settings"),
		Settings: []NavItem{{Key: NavMembers, Label: "Members", Href: "/settings/members", Summary: "Who can sign in, and with which role."},
			{Key: NavTokens, Label: "API tokens", Href: "/settings/tokens", Summary: "Bearer tokens for agents, CI and the CLI."},
			{Key: NavSecrets, Label: "Secrets", Href: "/settings/secrets", Summary: "Credentials injected by the egress gateway."},
			{Key: NavIntegrations, Label: "Integrations", Href: "/settings/integrations", Summary: "Outgoing webhooks."}},
		Operator: []NavItem{it(NavTenants, "Tenants", "/operator/tenants"), it(NavOperatorUsage, "Usage", "/operator/usage"),
			it(NavPrices, "Prices", "/operator/prices"), it(NavHosts, "Hosts", "/operator/hosts")},
	}
}

func sampleAudit() []AuditRow {
	return []AuditRow{
		{ID: "ev-104", Time: sampleTime("2026-11-30T06:12:44Z"), Code: "T2001I", Type: "token.create", Actor: "ada@acme.test",
			Target: "token ci-runner", Outcome: "success", Details: `role=developer ttl=720h`, RemoteAddr: "203.0.113.7"},
		{ID: "ev-103", Time: sampleTime("2026-11-30T05:58:02Z"), Code: "M1002I", Type: "member.role_change", Actor: "ada@acme.test",
			Target: "grace@acme.test", Outcome: "success", Details: "developer -> auditor", RemoteAddr: "203.0.113.7"},
		{ID: "ev-102", Time: sampleTime("2026-11-30T05:41:19Z"), Code: "A0003W", Type: "auth.login", Actor: "mallory@evil.test",
			Target: "", Outcome: "denied", Details: "not a member of any tenant", RemoteAddr: "198.51.100.23"},
		{ID: "ev-101", Time: sampleTime("2026-11-29T17:03:00Z"), Code: "M1001I", Type: "member.invite", Actor: "ada@acme.test",
			Target: "linus@acme.test", Outcome: "success", Details: "role=developer", RemoteAddr: "203.0.113.7"},
	}
}

func sampleAreas() []AreaCard {
	return []AreaCard{
		{Title: "Sandboxes", Href: "/sandboxes", Summary: "Isolated containers inside this tenant's VMs where agents run tasks."},
		{Title: "Terminals", Href: "/terminals", Summary: "Live agent terminals to drive or watch, and recordings to replay."},
		{Title: "VMs", Href: "/vms", Summary: "This tenant's virtual machines, their pool and placement."},
		{Title: "Policy", Href: "/policy", Summary: "Limits, egress rules and credentials for every sandbox."},
		{Title: "Usage", Href: "/usage", Summary: "CPU, memory and egress per sandbox, with billing exports."},
		{Title: "Compliance", Href: "/compliance", Summary: "The security checklist evaluated from live evidence."},
		{Title: "Audit", Href: "/audit", Summary: "Every security-relevant action, filterable and exportable."},
	}
}

func sampleLastUsed() *time.Time {
	t := sampleTime("2026-11-30T04:20:00Z")
	return &t
}

func samplePages() []samplePage {
	anonymous := Page{Title: "Sign in", DevIdP: true, RequestID: "req-01JDX4T6QA", AssetVersion: "3f9c2a1b7d0e"}
	roles := []string{"admin", "manager", "developer", "auditor", "billing"}

	memberRows := []MemberRow{
		{ID: "m1", Email: "ada@acme.test", Name: "Ada Lovelace", Role: "admin", Active: true, CreatedAt: sampleTime("2026-11-01T09:00:00Z")},
		{ID: "m2", Email: "grace@acme.test", Name: "Grace Hopper", Role: "auditor", Active: true, InvitedBy: "ada@acme.test", CreatedAt: sampleTime("2026-11-12T14:30:00Z")},
		{ID: "m3", Email: "linus@acme.test", Role: "developer", InvitedBy: "ada@acme.test", CreatedAt: sampleTime("2026-11-29T17:03:00Z")},
	}
	tokenRows := []TokenRow{
		{ID: "t1", Name: "ci-runner", Prefix: "stk_7Hq2", Role: "developer", CreatedAt: sampleTime("2026-11-30T06:12:44Z"),
			ExpiresAt: sampleTime("2026-12-30T06:12:44Z"), LastUsedAt: sampleLastUsed(), CanRevoke: true},
		{ID: "t2", Name: "eval-harness", Prefix: "stk_Zp0c", Role: "developer", CreatedAt: sampleTime("2026-10-02T08:00:00Z"),
			ExpiresAt: sampleTime("2026-11-01T08:00:00Z"), Expired: true},
		{ID: "t3", Name: "old-laptop", Prefix: "stk_b81K", Role: "admin", CreatedAt: sampleTime("2026-09-15T10:00:00Z"),
			ExpiresAt: sampleTime("2027-09-15T10:00:00Z"), Revoked: true},
	}
	ttl := []Choice{{Value: "24h", Label: "1 day"}, {Value: "720h", Label: "30 days"}, {Value: "2160h", Label: "90 days"}}

	noTenant := samplePageModel("No tenant", "")
	noTenant.Tenant, noTenant.Role, noTenant.Tenants = Tenant{}, "", nil
	choose := samplePageModel("Choose a tenant", "")
	choose.Tenant, choose.Role = Tenant{}, ""
	for i := range choose.Tenants {
		choose.Tenants[i].Current = false
	}
	devMembers := samplePageModel("Members", NavMembers)
	devMembers.Role, devMembers.IsOperator, devMembers.DevIdP = "developer", false, false
	flashed := samplePageModel("API tokens", NavTokens)
	flashed.Flash = []Flash{{Kind: FlashSuccess, Text: "Token ci-runner created."}}
	invalid := samplePageModel("Members", NavMembers)
	invalid.Flash = []Flash{{Kind: FlashError, Text: "The invitation was not sent."}}

	return []samplePage{
		{Name: "login", Title: "Sign in to Stockade", Page: anonymous,
			View: LoginPage(anonymous, LoginView{ProviderName: "Stockade dev IdP", DevIdP: true, ReturnTo: "/audit?type=auth.login"})},
		{Name: "login-error", Title: "Sign in to Stockade", Page: Page{Title: "Sign in"},
			View: LoginPage(Page{Title: "Sign in"}, LoginView{ProviderName: "Okta", Error: "Sign-in failed: the identity provider refused the request."})},
		{Name: "dashboard", Title: "Acme Corp", Page: samplePageModel("Dashboard", NavDashboard),
			View: Dashboard(samplePageModel("Dashboard", NavDashboard), DashboardView{TenantName: "Acme Corp", Role: "admin",
				Members: 3, ActiveTokens: 1, Areas: sampleAreas(),
				Tiles: []Tile{{ID: "sandboxes-running", Label: "sandboxes running", Value: "2", Href: "/sandboxes"}},
				Recent: []RecentRow{{Time: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Count: 6, Type: "egress.denied", Outcome: "denied",
					Actor: "egress gateway", Target: "sandbox 01a2b3c4d5e6 · debian", Href: "/sandboxes/01a2b3c4d5e6", Detail: "evil.example.com"}},
				MembersHref: "/settings/members", TokensHref: "/settings/tokens", AuditHref: "/audit"})},
		{Name: "members", Title: "Members", Page: samplePageModel("Members", NavMembers),
			View: Members(samplePageModel("Members", NavMembers), MembersView{Rows: memberRows, CanEdit: true, Roles: roles})},
		{Name: "members-invalid", Title: "Members", Page: invalid,
			View: Members(invalid, MembersView{Rows: memberRows, CanEdit: true, Roles: roles,
				Form: InviteForm{Email: "not-an-email", Role: "root", Errors: map[string]string{
					"email": "Enter an email address such as name@example.com.", "role": "Choose one of the roles listed."}}})},
		{Name: "members-readonly", Title: "Members", Page: devMembers,
			View: Members(devMembers, MembersView{Rows: memberRows, Roles: roles})},
		{Name: "tokens", Title: "API tokens", Page: flashed,
			View: Tokens(flashed, TokensView{Rows: tokenRows, CanEdit: true, Roles: roles, TTLChoices: ttl,
				NewSecret: "stk_7Hq2.c2VjcmV0LXNob3duLW9uY2UtZm9yLXRoZS1wcmV2aWV3LW9ubHk", NewSecretName: "ci-runner",
				Form: TokenForm{TTL: "720h", Role: "developer"}})},
		{Name: "tokens-empty", Title: "API tokens", Page: samplePageModel("API tokens", NavTokens),
			View: Tokens(samplePageModel("API tokens", NavTokens), TokensView{CanEdit: true, Roles: roles, TTLChoices: ttl,
				Form: TokenForm{Name: "x", Errors: map[string]string{"name": "Name must be 3 to 64 characters.", FormError: "The token was not created."}}})},
		{Name: "secrets", Title: "Secrets", Page: samplePageModel("Secrets", NavSecrets),
			View: Secrets(samplePageModel("Secrets", NavSecrets), SecretsView{CanEdit: true, TTLChoices: ttl, Created: "NPM_TOKEN",
				Form: SecretForm{Name: "gh token", Hosts: "https://api.github.com/", TTL: "30d", Errors: map[string]string{
					"name": "must be 1-64 characters A-Z, 0-9 or '_'", "hosts": "must be a domain name like api.github.com"}},
				Rows: []SecretRow{
					{Name: "GITHUB_TOKEN", Hosts: []string{"api.github.com", "*.githubusercontent.com"}, State: "active", CreatedBy: "Ada Lovelace",
						CreatedAt: sampleTime("2026-11-20T11:45:00Z"), ExpiresAt: new(sampleTime("2026-12-20T11:45:00Z"))},
					{Name: "OLD_KEY", Hosts: []string{"api.example.com"}, State: "revoked", CreatedAt: sampleTime("2026-10-01T09:00:00Z"),
						RevokedAt: new(sampleTime("2026-11-01T09:00:00Z"))},
				}})},
		{Name: "secrets-readonly", Title: "Secrets", Page: devMembers,
			View: Secrets(devMembers, SecretsView{Rows: []SecretRow{{Name: "GITHUB_TOKEN", State: "active", CreatedAt: sampleTime("2026-11-20T11:45:00Z")}}})},
		{Name: "tenants", Title: "Tenants", Page: samplePageModel("Tenants", NavTenants),
			View: Tenants(samplePageModel("Tenants", NavTenants), TenantsView{Rows: []TenantRow{
				{Slug: "acme", Name: "Acme Corp", Members: 3, CreatedAt: sampleTime("2026-11-01T09:00:00Z")},
				{Slug: "globex", Name: "Globex Research", Members: 12, CreatedAt: sampleTime("2026-11-20T11:45:00Z"), ID: "t-globex",
					Frozen: &FreezeView{Since: sampleTime("2026-11-29T22:10:00Z"), Reason: "agent exfiltrating", By: "op@platform.test"}},
			}, Form: TenantForm{Slug: "Bad Slug", Errors: map[string]string{"slug": "Use lowercase letters, digits and dashes."}}})},
		{Name: "compliance", Title: "Compliance", Page: samplePageModel("Compliance", NavCompliance),
			View: Compliance(samplePageModel("Compliance", NavCompliance), sampleCompliance(false))},
		{Name: "compliance-print", Title: "Compliance", Page: samplePageModel("Compliance", NavCompliance),
			View: CompliancePrint(samplePageModel("Compliance", NavCompliance), sampleCompliance(true))},
		{Name: "compliance-unavailable", Title: "Compliance", Page: samplePageModel("Compliance", NavCompliance),
			View: Compliance(samplePageModel("Compliance", NavCompliance), ComplianceView{Unavailable: "The compliance service is not running on this server."})},
		{Name: "probe-run", Title: "Probe run", Page: samplePageModel("Probe run", NavCompliance),
			View: ProbeRunPage(samplePageModel("Probe run", NavCompliance), sampleCompliance(false).Probes[0])},
		{Name: "audit", Title: "Audit log", Page: samplePageModel("Audit log", NavAudit),
			View: Audit(samplePageModel("Audit log", NavAudit), AuditView{Rows: sampleAudit(),
				Filter:   AuditFilter{Type: "member.invite", Since: "2026-11-01"},
				Types:    []string{"auth.login", "member.invite", "member.role_change", "token.create", "token.revoke"},
				Outcomes: []string{"success", "failure", "denied"}, NextURL: "/audit?before=ev-101&type=member.invite",
				ExportJSONL: "/audit/export.jsonl?type=member.invite", ExportCSV: "/audit/export.csv?type=member.invite"})},
		{Name: "audit-empty", Title: "Audit log", Page: samplePageModel("Audit log", NavAudit),
			View: Audit(samplePageModel("Audit log", NavAudit), AuditView{Filter: AuditFilter{Actor: "nobody"}})},
		{Name: "settings", Title: "Settings", Page: samplePageModel("Settings", NavSettings),
			View: Settings(samplePageModel("Settings", NavSettings), SettingsView{Email: "ada@acme.test", Name: "Ada Lovelace",
				Issuer: "http://127.0.0.1:8080/dev-idp", SessionCreated: sampleTime("2026-11-30T06:01:00Z"),
				SessionExpires: sampleTime("2026-11-30T18:01:00Z"), Role: "admin"})},
		{Name: "no-tenant", Title: "No tenant yet", Page: noTenant,
			View: NoTenant(noTenant, NoTenantView{IsOperator: true})},
		{Name: "choose-tenant", Title: "Choose a tenant", Page: choose,
			View: ChooseTenant(choose, ChooseTenantView{Tenants: choose.Tenants})},
		{Name: "error", Title: "Not Found", Page: samplePageModel("Not found", ""),
			View: ErrorPage(samplePageModel("Not found", ""), ErrorView{Status: 404, Detail: "There is no such page in this tenant."})},
		{Name: "error-anonymous", Title: "Session expired", Page: anonymous,
			View: ErrorPage(anonymous, ErrorView{Status: 401, Title: "Session expired", Detail: "Sign in again to continue.", RequestID: "req-01JDX4T6QB"})},
	}
}
