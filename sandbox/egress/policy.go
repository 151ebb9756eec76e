package egress

import (
	"context"

	"github.com/stockade-dev/stockade/tenants/policy"
)

// FromPolicy reads the egress rules from the tenant policy store: the
// current version's network.egress.
func FromPolicy(st *policy.Store) Policies {
	return PoliciesFunc(func(ctx context.Context, tenantID string) (Rules, int, error) {
		v, err := st.Current(ctx, tenantID)
		if err != nil {
			return Rules{}, 0, err
		}
		e := v.Doc.Network.Egress
		conv := func(in []policy.Rule) []Rule {
			out := make([]Rule, len(in))
			for i, r := range in {
				out[i] = Rule{Domain: r.Domain, Ports: r.Ports}
			}
			return out
		}
		return Rules{Default: e.Default, Allow: conv(e.Allow), Deny: conv(e.Deny)}, v.Version, nil
	})
}
