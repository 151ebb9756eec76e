package views

import (
	"slices"
	"strings"
	"time"
)

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
	// CreatedEchoable: it may go in a body, query or path (a warning).
	CreatedEchoable bool
	// Edit names the secret whose "where it may go" form failed, with
	// its input and errors.
	Edit     string
	EditForm SecretForm
}

// SecretRow is one secret, without its value.
type SecretRow struct {
	Name  string
	Hosts []string // empty for non-admins
	// Inject is where the gateway may put the value (admins only):
	// "authorization", "header:<Name>", "query", "path", "body".
	Inject    []string
	State     string // active | expired | revoked
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// SecretForm is the create form after a failed POST: never the value.
// Inject and Headers are also the edit form of one secret's locations.
type SecretForm struct {
	Name  string
	Hosts string
	TTL   string
	// Inject holds the ticked locations: authorization, query, path, body.
	Inject []string
	// Headers is the comma list of other request headers it may go in.
	Headers string
	Errors  map[string]string // keyed by field name (name, value, hosts, ttl, inject) or FormError
}

// Ticked reports whether location loc is ticked.
func (f SecretForm) Ticked(loc string) bool { return slices.Contains(f.Inject, loc) }

// InjectChoices are the tickable locations, in order, and whether each
// needs the echo warning.
var InjectChoices = []struct {
	Value, Label string
	Echoable     bool
}{
	{"authorization", "Authorization header", false},
	{"query", "URL query", true},
	{"path", "URL path", true},
	{"body", "Request body (up to 1 MiB)", true},
}

// FormOfInject is the edit form of a secret's locations.
func FormOfInject(inject []string) SecretForm {
	f := SecretForm{}
	var headers []string
	for _, l := range inject {
		if h, ok := strings.CutPrefix(l, "header:"); ok {
			headers = append(headers, h)
		} else {
			f.Inject = append(f.Inject, l)
		}
	}
	f.Headers = strings.Join(headers, ", ")
	return f
}

// echoable reports whether loc is one an upstream may echo or store.
func echoable(loc string) bool { return loc == "query" || loc == "path" || loc == "body" }

// injectLabel is a location as the table shows it.
func injectLabel(loc string) string {
	if h, ok := strings.CutPrefix(loc, "header:"); ok {
		return h + " header"
	}
	for _, c := range InjectChoices {
		if c.Value == loc {
			return c.Label
		}
	}
	return loc
}

// injectDescribedBy is what describes a "goes in" checkbox: the echo
// warning for query, path and body, and the group's error when it has one.
func injectDescribedBy(form string, echoable, invalid bool) string {
	var ids []string
	if echoable {
		ids = append(ids, form+"-inject-warning")
	}
	if invalid {
		ids = append(ids, form+"-inject-error")
	}
	return strings.Join(ids, " ")
}
