package views

import "time"

// NavSecrets marks the Settings > Secrets page.
const NavSecrets = "secrets"

// SecretsView is the tenant's secrets (Settings > Secrets). It never holds a
// secret's value: not even the one just created.
type SecretsView struct {
	Rows []SecretRow
	// CanEdit: admins create and revoke, and see hosts and authors; others
	// see names and states only.
	CanEdit    bool
	Form       SecretForm
	TTLChoices []Choice
	// Created names the secret this response created.
	Created string
}

// SecretRow is one secret, without its value.
type SecretRow struct {
	Name      string
	Hosts     []string // empty for non-admins
	State     string   // active | expired | revoked
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// SecretForm is the create form after a failed POST: never the value.
type SecretForm struct {
	Name   string
	Hosts  string
	TTL    string
	Errors map[string]string // keyed by field name (name, value, hosts, ttl) or FormError
}
