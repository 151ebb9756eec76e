package notify

import (
	"context"
	"fmt"
	"strings"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// placeholderStore is what HostScoped needs of *secrets.Store.
type placeholderStore interface {
	Placeholder(tenantID, sandboxID, name string) string
	ForHost(ctx context.Context, tenantID, sandboxID, host string) (*strings.Replacer, bool, error)
}

// scope stands where a sandbox id would: the control plane's own use of a
// secret.
const scope = "stockade-notify"

// HostScoped gives secret values through the same rule the egress gateway
// applies: a secret's value goes only to the hosts it is scoped to. The
// value is obtained by swapping the placeholder of the secret for it, as the
// gateway does, so the secret store needs no other way out.
func HostScoped(s placeholderStore) Secrets { return hostScoped{s} }

type hostScoped struct{ s placeholderStore }

func (h hostScoped) Value(ctx context.Context, tenantID, name, host string) (string, error) {
	ph := h.s.Placeholder(tenantID, scope, name)
	r, ok, err := h.s.ForHost(ctx, tenantID, scope, host)
	if err != nil {
		return "", err
	}
	if ok {
		if v := r.Replace(ph); v != ph {
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: no live secret %s %w %s", errdefs.ErrNotFound, name, errNotScoped, host)
}
