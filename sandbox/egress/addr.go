package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// blockedRange is an address range no sandbox reaches unless an operator
// range allows it.
type blockedRange struct {
	prefix netip.Prefix
	why    string
}

// blockedRanges: everything that is not the public internet. Metadata
// addresses come first so the reason names them.
var blockedRanges = func() []blockedRange {
	list := []struct{ cidr, why string }{
		{"169.254.169.254/32", "cloud metadata address"},
		{"fd00:ec2::254/128", "cloud metadata address"},
		{"0.0.0.0/8", "unspecified address"},
		{"10.0.0.0/8", "private address"},
		{"100.64.0.0/10", "CGNAT address"},
		{"127.0.0.0/8", "loopback address"},
		{"169.254.0.0/16", "link-local address"},
		{"172.16.0.0/12", "private address"},
		{"192.0.0.0/24", "IETF protocol address"},
		{"192.168.0.0/16", "private address"},
		{"198.18.0.0/15", "benchmarking address"},
		{"224.0.0.0/4", "multicast address"},
		{"240.0.0.0/4", "reserved address"},
		{"::/128", "unspecified address"},
		{"::1/128", "loopback address"},
		{"64:ff9b::/96", "NAT64 address"},
		{"64:ff9b:1::/48", "NAT64 address"},
		{"fc00::/7", "private address"},
		{"fe80::/10", "link-local address"},
		{"ff00::/8", "multicast address"},
	}
	out := make([]blockedRange, len(list))
	for i, l := range list {
		out[i] = blockedRange{netip.MustParsePrefix(l.cidr), l.why}
	}
	return out
}()

// checkAddr says why a is blocked ("" when it is not). allow lists the
// operator's ranges, which win over every block.
func checkAddr(a netip.Addr, allow []netip.Prefix) string {
	a = a.Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return ""
		}
	}
	for _, b := range blockedRanges {
		if b.prefix.Contains(a) {
			return b.why + " " + a.String()
		}
	}
	return ""
}

// ParseCIDRs reads a comma-separated list of ranges
// (STOCKADE_EGRESS_ALLOW_CIDRS); a bare address is its own /32 or /128.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("egress allowance %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("egress allowance %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
