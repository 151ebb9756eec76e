// Package views holds the HTML pages of the web app as templ components and the
// view models they take. Handlers fill the models; views never see database rows
// or domain types, so a page can only show what a handler chose to hand it.
package views

import "time"

// Navigation keys for Page.Active: the left navigation marks the item whose key
// matches with aria-current="page".
const (
	NavDashboard  = "dashboard"
	NavSandboxes  = "sandboxes"
	NavTerminals  = "terminals"
	NavVMs        = "vms"
	NavPolicy     = "policy"
	NavEgress     = "egress"
	NavUsage      = "usage"
	NavCompliance = "compliance"
	NavAudit      = "audit"
	NavSettings   = "settings"
	NavMembers    = "members"
	NavTokens     = "tokens"
	NavTenants    = "tenants"
	NavHosts      = "hosts"
)

// Flash kinds.
const (
	FlashSuccess = "success"
	FlashError   = "error"
	FlashInfo    = "info"
	FlashWarn    = "warn"
)

// FormError is the Errors key for a message about a whole form rather than one
// field; every other key is the name of the input it belongs to.
const FormError = ""

// Page is what every page's shell needs: who is signed in, in which tenant, and
// the per-request values (CSRF token, request id, asset version).
type Page struct {
	Title  string
	Active string // one of the Nav* keys; empty marks nothing
	User   User   // zero on pages shown before sign-in
	Tenant Tenant // zero when no tenant is selected
	Role   string // the user's role in Tenant
	// Tenants are the tenants the user may switch to (POST /tenant/switch, field slug).
	Tenants      []TenantChoice
	IsOperator   bool
	CSRF         string
	DevIdP       bool // the embedded development identity provider is in use
	RequestID    string
	Flash        []Flash
	AssetVersion string // appended to asset URLs as ?v= so a new build busts caches
	// Nav is the navigation: only the pages the caller may open.
	Nav Nav
	// Frozen is the tenant's freeze, shown as a banner on every page.
	Frozen *FreezeView
}

// Nav is the caller's navigation, each list holding only what the caller
// may open (handlers derive it from the route table's permissions).
type Nav struct {
	Main     []NavItem // the tenant's pages, dashboard first
	Hub      NavItem   // the Settings hub; zero when it may not be opened
	Settings []NavItem // the pages under Settings
	Operator []NavItem // the platform operators' pages
}

// NavItem is one link of the navigation; Summary describes it where the
// dashboard and the Settings hub show it as a card.
type NavItem struct {
	Key     string
	Label   string
	Href    string
	Summary string
}

// User is the signed-in person.
type User struct {
	Email string
	Name  string
}

// Tenant is the currently selected tenant.
type Tenant struct {
	Slug string
	Name string
}

// TenantChoice is one entry of the tenant switcher.
type TenantChoice struct {
	Slug    string
	Name    string
	Role    string
	Current bool
}

// Flash is a one-time message shown at the top of the content.
type Flash struct {
	Kind string // FlashSuccess, FlashError or FlashInfo
	Text string
	ID   string // optional element id, for links and tests
}

// Choice is one option of a select.
type Choice struct {
	Value string
	Label string
}

// LoginView is the sign-in page.
type LoginView struct {
	ProviderName string
	DevIdP       bool
	Error        string
	ReturnTo     string // passed on to /login/start as return_to
}

// MembersView is the tenant's member list (Settings > Members).
type MembersView struct {
	Rows    []MemberRow
	CanEdit bool // admins may invite, change roles and remove
	Roles   []string
	Form    InviteForm
}

// MemberRow is one membership.
type MemberRow struct {
	ID        string
	Email     string
	Name      string
	Role      string
	Active    bool // false for an invitation not yet taken up by a first sign-in
	InvitedBy string
	CreatedAt time.Time
}

// InviteForm is the invite form's values and field errors after a failed POST.
type InviteForm struct {
	Email  string
	Role   string
	Errors map[string]string // keyed by field name (email, role) or FormError
}

// TokensView is the tenant's API tokens (Settings > API tokens).
type TokensView struct {
	Rows    []TokenRow
	CanEdit bool
	// All: Rows are every token of the tenant (tokens.read), not only the
	// caller's own.
	All bool
	// Role is the caller's role; Roles the token roles it may choose.
	Role  string
	Roles []string
	// NewSecret is set only on the response that created a token: it is shown once.
	NewSecret     string
	NewSecretName string
	Form          TokenForm
	TTLChoices    []Choice
}

// TokenRow is one API token; its secret is never part of it.
type TokenRow struct {
	ID         string
	Name       string
	Prefix     string
	Role       string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastUsedAt *time.Time
	Revoked    bool
	Expired    bool
	// CreatedBy names who made it ("you", an email, "an operator").
	CreatedBy string
	Mine      bool
	CanRevoke bool
}

// TokenForm is the create-token form's values and field errors.
type TokenForm struct {
	Name   string
	Role   string
	TTL    string
	Errors map[string]string // keyed by field name (name, role, ttl) or FormError
}

// TenantsView is the operator's tenant list.
type TenantsView struct {
	Rows []TenantRow
	Form TenantForm
	// Quotas is the quota editor (views/operator_usage.templ).
	Quotas TenantQuotasView
}

// TenantRow is one tenant.
type TenantRow struct {
	ID        string
	Slug      string
	Name      string
	Members   int
	CreatedAt time.Time
	// Frozen is set while an operator has frozen the tenant (incident
	// response).
	Frozen *FreezeView
	// Live is how many sandboxes a freeze would destroy now.
	Live int
	// FreezeReason and FreezeErrors are a refused freeze form's.
	FreezeReason string
	FreezeErrors map[string]string
}

// TenantForm is the create-tenant form's values and field errors.
type TenantForm struct {
	Slug       string
	Name       string
	AdminEmail string            // optional: invited as the tenant's first admin
	Errors     map[string]string // keyed by field name (slug, name, admin_email) or FormError
}

// AuditView is one page of the audit log.
type AuditView struct {
	Rows   []AuditRow
	Filter AuditFilter
	Types  []string
	// Outcomes fills the outcome select; when empty the field is free text.
	Outcomes    []string
	NextURL     string // older events; empty on the last page
	ExportJSONL string
	ExportCSV   string
}

// AuditRow is one audit event.
type AuditRow struct {
	ID         string
	Time       time.Time
	Code       string
	Type       string
	Actor      string
	Target     string
	TargetHref string // the target's page; empty: no link
	Outcome    string
	Details    string      // compact JSON (exports, the dashboard)
	Pairs      []AuditPair // the details as shown on the audit page
	RemoteAddr string
}

// AuditFilter is the filter form (GET /audit). Since and Until are dates as
// YYYY-MM-DD (an <input type="date">), empty for no bound.
type AuditFilter struct {
	Type    string
	Actor   string
	Outcome string
	Since   string
	Until   string
	// Errors name the filter's fields that could not be read.
	Errors map[string]string
}

// SettingsView is the user's profile and session.
type SettingsView struct {
	Email          string
	Name           string
	Issuer         string
	SessionCreated time.Time
	SessionExpires time.Time
	Role           string
}

// NoTenantView is shown to a signed-in user who belongs to no tenant.
type NoTenantView struct {
	IsOperator bool
}

// ChooseTenantView asks a member of several tenants which one to open.
type ChooseTenantView struct {
	Tenants []TenantChoice
}

// ErrorView is an error page.
type ErrorView struct {
	Status    int
	Title     string
	Detail    string
	RequestID string
}
