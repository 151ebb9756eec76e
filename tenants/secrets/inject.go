package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// Where in a request the egress gateway may put a secret's value in place
// of its placeholder. A secret names one or more; the default is the
// Authorization header only.
const (
	InjectAuthorization = "authorization"
	// InjectHeaderPrefix + a header name, e.g. "header:X-Api-Key".
	InjectHeaderPrefix = "header:"
	InjectQuery        = "query"
	InjectPath         = "path"
	InjectBody         = "body"
)

// MaxInject bounds the locations of one secret.
const MaxInject = 16

// DefaultInject is where a secret goes when its owner says nothing.
func DefaultInject() []string { return []string{InjectAuthorization} }

// Echoable reports whether loc is a location an upstream commonly stores or
// echoes (a created issue, an error page quoting the path): opting in to it
// needs a warning, since the response scrubbing cannot undo a value the
// upstream transformed or serves back from another host.
func Echoable(loc string) bool {
	return loc == InjectQuery || loc == InjectPath || loc == InjectBody
}

// headers that carry framing or routing: a secret in them makes no sense and
// a placeholder there is never swapped.
var noInjectHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Te", "Trailer",
	"Upgrade", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Content-Encoding"}

// NormalizeInject validates a list of locations and returns it canonical:
// lowercase keywords, "header:" names in canonical form ("header:x-api-key"
// becomes "header:X-Api-Key", "header:Authorization" becomes
// "authorization"), duplicates dropped, order kept. Empty means
// DefaultInject.
func NormalizeInject(locs []string) ([]string, error) {
	if len(locs) == 0 {
		return DefaultInject(), nil
	}
	if len(locs) > MaxInject {
		return nil, errdefs.Invalid("inject", "inject_count", fmt.Sprintf("give at most %d locations", MaxInject))
	}
	var out []string
	for _, l := range locs {
		l = strings.TrimSpace(l)
		loc := strings.ToLower(l)
		if name, ok := strings.CutPrefix(loc, InjectHeaderPrefix); ok {
			name = strings.TrimSpace(l[len(InjectHeaderPrefix):])
			if !validHeaderName(name) {
				return nil, errdefs.Invalid("inject", "inject_header", fmt.Sprintf("%q: want header:<Name> with a header name like X-Api-Key", l))
			}
			name = textproto.CanonicalMIMEHeaderKey(name)
			if slices.Contains(noInjectHeaders, name) {
				return nil, errdefs.Invalid("inject", "inject_header", fmt.Sprintf("%q: the gateway never puts a secret in %s", l, name))
			}
			loc = InjectHeaderPrefix + name
			if name == "Authorization" {
				loc = InjectAuthorization
			}
		} else if loc != InjectAuthorization && !Echoable(loc) {
			return nil, errdefs.Invalid("inject", "inject_location",
				fmt.Sprintf("%q: want authorization, header:<Name>, query, path or body", l))
		}
		if !slices.Contains(out, loc) {
			out = append(out, loc)
		}
	}
	return out, nil
}

// validHeaderName: an RFC 9110 token, at most 64 characters.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Credential is one live secret as the egress gateway handles it on a
// connection to one host.
type Credential struct {
	Name        string
	Placeholder string
	Value       string
	// Inject is where in a request to the host the value may replace the
	// placeholder; nil when the secret is not scoped to the host. Either
	// way the gateway rewrites the value back to the placeholder in what
	// the host answers.
	Inject []string
}

// Credentials returns what the gateway needs on a connection from the
// sandbox to host (a name, with or without a port): every live secret of
// the tenant with the sandbox's placeholder and its value, and, for those
// scoped to host, where the value may be injected. ok is false when no
// secret is scoped to host: the gateway then passes the connection through
// untouched (no TLS termination). Revocation and expiry apply from the next
// call.
func (s *Store) Credentials(ctx context.Context, tenantID, sandboxID, host string) ([]Credential, bool, error) {
	host = hostOnly(host)
	rows, err := s.liveRows(ctx, tenantID)
	if err != nil {
		return nil, false, fmt.Errorf("credentials for %s: %w", host, err)
	}
	scoped := false
	out := make([]Credential, 0, len(rows))
	for i := range rows {
		v, err := s.seal.open(rows[i].Ciphertext, secretAD(tenantID, rows[i].ID))
		if err != nil {
			return nil, false, fmt.Errorf("secret %s for %s: %w", rows[i].Name, host, err)
		}
		c := Credential{Name: rows[i].Name, Placeholder: s.Placeholder(tenantID, sandboxID, rows[i].Name), Value: string(v)}
		if slices.ContainsFunc(rows[i].Hosts, func(p string) bool { return MatchHost(p, host) }) {
			c.Inject = slices.Clone(rows[i].inject())
			scoped = true
		}
		out = append(out, c)
	}
	if !scoped {
		return nil, false, nil
	}
	return out, true, nil
}

// SetInject changes where the tenant's live secret called name may be
// injected (nil or empty: DefaultInject). The audit event names the old and
// new locations. No such secret is errdefs.ErrNotFound.
func (s *Store) SetInject(ctx context.Context, actor audit.Actor, tenantID, name string, inject []string) (Secret, error) {
	locs, err := NormalizeInject(inject)
	if err != nil {
		return Secret{}, err
	}
	var r row
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Omit("ciphertext").Take(&r, "tenant_id = ? AND name = ? AND revoked_at IS NULL", tenantID, name).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return errdefs.ErrNotFound
			}
			return err
		}
		before := r.inject()
		if slices.Equal(before, locs) {
			return nil
		}
		res := tx.Model(&row{}).Where("id = ? AND tenant_id = ? AND revoked_at IS NULL", r.ID, tenantID).Update("inject", injectJSON(locs))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errdefs.ErrNotFound
		}
		r.Inject = locs
		return s.write(tx, actor.Event(tenantID, audit.TypeSecretUpdated, "secret", r.ID, map[string]any{
			"secret_name": name, "inject_from": before, "inject": locs,
		}))
	})
	if err != nil {
		return Secret{}, fmt.Errorf("set injection of secret %s in tenant %s: %w", name, tenantID, err)
	}
	return r.public(s.now()), nil
}

// inject is the row's locations, the default for a row that has none.
func (r *row) inject() []string {
	if len(r.Inject) == 0 {
		return DefaultInject()
	}
	return r.Inject
}

// injectJSON is the column's text for locs (the serializer's form).
func injectJSON(locs []string) string {
	b, _ := json.Marshal(locs) // a []string always marshals
	return string(b)
}
