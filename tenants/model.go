package tenants

import "time"

// Role is a member's role inside one tenant.
type Role string

const (
	RoleAdmin     Role = "admin"     // policy, members, secrets, integrations, tokens
	RoleManager   Role = "manager"   // read all of the tenant, usage, compliance
	RoleDeveloper Role = "developer" // sandboxes, terminals
	RoleAuditor   Role = "auditor"   // read-only audit, recordings, compliance
	RoleBilling   Role = "billing"   // usage and exports
)

// Roles lists every tenant role in display order.
var Roles = []Role{RoleAdmin, RoleManager, RoleDeveloper, RoleAuditor, RoleBilling}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool {
	for _, x := range Roles {
		if r == x {
			return true
		}
	}
	return false
}

// Tenant is a company or team: the unit of isolation.
type Tenant struct {
	ID        string `gorm:"primaryKey"`
	Slug      string
	Name      string
	CreatedAt time.Time
}

// User is a person, keyed by (Issuer, Subject) of their identity provider.
type User struct {
	ID          string `gorm:"primaryKey"`
	Issuer      string
	Subject     string
	Email       string
	Name        string
	CreatedAt   time.Time
	LastLoginAt *time.Time
}

// Membership gives a user (or, before first login, an invited email) a role
// in a tenant. UserID is empty until the invitee first logs in.
type Membership struct {
	ID          string `gorm:"primaryKey"`
	TenantID    string
	UserID      *string
	Email       string
	Role        Role
	InvitedBy   string
	CreatedAt   time.Time
	ActivatedAt *time.Time
}

// Active reports whether the invitee has logged in.
func (m Membership) Active() bool { return m.UserID != nil && m.ActivatedAt != nil }

// APIToken is a bearer token for /api/v1. Only a hash of the secret is kept;
// Prefix is the visible start of the token, for people to tell tokens apart.
type APIToken struct {
	ID        string `gorm:"primaryKey"`
	TenantID  string
	Name      string
	Prefix    string
	Hash      string `json:"-"`
	Role      Role
	CreatedBy string // the actor's id: a user, a token, or a system actor
	// CreatedByUserID is the person behind the token: the user who made it,
	// or made the token that made it; nil for operator-made tokens (CLI).
	// Authentication requires that person to be an active member still,
	// and caps the token's role at theirs.
	CreatedByUserID *string
	CreatedAt       time.Time
	ExpiresAt       time.Time
	LastUsedAt      *time.Time
	RevokedAt       *time.Time
}

// Session is a signed-in browser. ID is the SHA-256 of the cookie value.
type Session struct {
	ID         string `gorm:"primaryKey"`
	UserID     string
	TenantID   string // the tenant the browser currently acts in; "" until chosen
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time // absolute expiry
	UserAgent  string
	RemoteAddr string
}
