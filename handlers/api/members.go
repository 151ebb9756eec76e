package api

// Member is a member or pending invitation of the tenant.
type Member struct {
	ID        string `json:"id"`
	Email     string `json:"email"`
	Role      string `json:"role" enum:"admin,manager,developer,auditor,billing"`
	Active    bool   `json:"active" doc:"signed in since the invitation"`
	InvitedBy string `json:"invited_by,omitempty"`
	CreatedAt string `json:"created_at" format:"date-time"`
}

// MemberList answers GET /api/v1/members.
type MemberList struct {
	Members []Member `json:"members" nonnull:"true"`
}

// InviteMember is the body of POST /api/v1/members.
type InviteMember struct {
	Email string `json:"email" doc:"their email"`
	Role  string `json:"role" enum:"admin,manager,developer,auditor,billing"`
}

// UpdateMember is the body of PATCH /api/v1/members/{id}.
type UpdateMember struct {
	Role string `json:"role" enum:"admin,manager,developer,auditor,billing"`
}

// Token is an API token; its secret only in the answer to its creation.
type Token struct {
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	Prefix     string  `json:"prefix" doc:"visible start of the secret"`
	Role       string  `json:"role" enum:"admin,manager,developer,auditor,billing"`
	CreatedAt  string  `json:"created_at" format:"date-time"`
	ExpiresAt  string  `json:"expires_at" format:"date-time"`
	LastUsedAt *string `json:"last_used_at" format:"date-time"`
	Revoked    bool    `json:"revoked"`
	Token      string  `json:"token,omitempty" doc:"the secret: only in the answer to its creation"`
}

// TokenList answers GET /api/v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens" nonnull:"true"`
}

// CreateToken is the body of POST /api/v1/tokens.
type CreateToken struct {
	Name string `json:"name" doc:"what it is for"`
	Role string `json:"role" enum:"admin,manager,developer,auditor,billing"`
	TTL  string `json:"ttl,omitempty" doc:"lifetime: 24h, 7d, 30d, 90d or 365d; default 30d"`
}

// Secret is a tenant secret, never with its value.
type Secret struct {
	Name      string   `json:"name"`
	State     string   `json:"state" enum:"active,expired,revoked"`
	Hosts     []string `json:"hosts,omitempty" doc:"host patterns it may be sent to (admins only)"`
	Inject    []string `json:"inject,omitempty" doc:"where it may be injected: authorization (the default), header:<Name>, query, path or body"`
	CreatedBy string   `json:"created_by,omitempty"`
	CreatedAt string   `json:"created_at" format:"date-time"`
	ExpiresAt *string  `json:"expires_at" format:"date-time"`
	RevokedAt *string  `json:"revoked_at,omitempty" format:"date-time"`
}

// SecretList answers GET /api/v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets" nonnull:"true"`
}

// CreateSecret is the body of POST /api/v1/secrets.
type CreateSecret struct {
	Name   string   `json:"name" doc:"the environment variable sandboxes see, A-Z 0-9 _"`
	Value  string   `json:"value" doc:"the secret; one line of text"`
	Hosts  []string `json:"hosts" doc:"api.github.com or *.example.com"`
	Inject []string `json:"inject,omitempty" doc:"authorization (the default), header:<Name>, query, path or body; query, path and body are opt-in: an upstream may echo or store what it gets there"`
	TTL    string   `json:"ttl,omitempty" doc:"lifetime: 1h, 24h, 7d, 30d (default), 90d or 365d"`
}

// UpdateSecret is the body of PATCH /api/v1/secrets/{name}.
type UpdateSecret struct {
	Inject []string `json:"inject" doc:"authorization (the default), header:<Name>, query, path or body; empty: the Authorization header only"`
}

// SecretParams names a secret in the path.
type SecretParams struct {
	Name string `path:"name" doc:"the secret's name"`
}
