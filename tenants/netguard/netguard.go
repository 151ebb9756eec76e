// Package netguard is the one list of addresses the control plane never
// connects to on a tenant's behalf: the egress gateway (for sandboxes),
// outgoing webhooks and the integrations' endpoint checks all use it, and
// its Dialer checks the address actually dialled, after DNS, so a name that
// resolves to a blocked address is refused too (no DNS rebinding).
//
// A literal with an IPv6 zone ("fe80::1%eth0", "::1%lo") is always
// refused: a zone names an interface of this host, and a zoned address
// matches no prefix, so it would slip past every range below. Addresses are
// tested with the zone stripped and IPv4-mapped IPv6 unmapped.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked: the address is not one the control plane connects to.
var ErrBlocked = errors.New("address blocked")

// Blocked says why an address was refused; errors.Is(err, ErrBlocked).
type Blocked struct {
	Addr netip.Addr // zone stripped; invalid when Host is not an address
	Zone string     // the zone the address came with, if any
	Host string     // what was refused when it is not an address
	Why  string     // "loopback address", "zoned address", ...
}

func (b *Blocked) Error() string {
	switch {
	case !b.Addr.IsValid():
		return fmt.Sprintf("%s %.100q", b.Why, b.Host)
	case b.Zone != "":
		return fmt.Sprintf("%s %s%%%s", b.Why, b.Addr, b.Zone)
	}
	return b.Why + " " + b.Addr.String()
}

// Is makes errors.Is(err, ErrBlocked) true.
func (b *Blocked) Is(target error) bool { return target == ErrBlocked }

// Range is one blocked range and why.
type Range struct {
	Prefix netip.Prefix
	Why    string
	// Fixed ranges no operator allowance can open: the metadata service,
	// loopback (the control plane and its database listen there) and the
	// unspecified addresses (which reach this host).
	Fixed bool
}

// ranges: everything that is not the public internet. Metadata addresses
// come first so the reason names them.
var ranges = func() []Range {
	list := []struct {
		cidr, why string
		fixed     bool
	}{
		{"169.254.169.254/32", "cloud metadata address", true},
		{"fd00:ec2::254/128", "cloud metadata address", true},
		{"0.0.0.0/8", "unspecified address", true},
		{"127.0.0.0/8", "loopback address", true},
		{"::/128", "unspecified address", true},
		{"::1/128", "loopback address", true},
		{"10.0.0.0/8", "private address", false},
		{"100.64.0.0/10", "CGNAT address", false},
		{"169.254.0.0/16", "link-local address", false},
		{"172.16.0.0/12", "private address", false},
		{"192.0.0.0/24", "IETF protocol address", false},
		{"192.0.2.0/24", "documentation address (TEST-NET-1)", false},
		{"192.88.99.0/24", "6to4 relay address", false},
		{"192.168.0.0/16", "private address", false},
		{"198.18.0.0/15", "benchmarking address", false},
		{"198.51.100.0/24", "documentation address (TEST-NET-2)", false},
		{"203.0.113.0/24", "documentation address (TEST-NET-3)", false},
		{"224.0.0.0/4", "multicast address", false},
		{"240.0.0.0/4", "reserved address", false},
		// IPv6 forms that embed an IPv4 address or reach one through a
		// translator: blocked whole, the embedded address is not trusted.
		{"::/96", "IPv4-compatible address", false},
		{"64:ff9b::/96", "NAT64 address", false},
		{"64:ff9b:1::/48", "NAT64 address", false},
		{"100::/64", "discard address", false},
		{"2001::/32", "Teredo address", false},
		{"2001:db8::/32", "documentation address", false},
		{"2002::/16", "6to4 address", false},
		{"fc00::/7", "private address", false},
		{"fe80::/10", "link-local address", false},
		{"fec0::/10", "site-local address", false},
		{"ff00::/8", "multicast address", false},
	}
	out := make([]Range, len(list))
	for i, l := range list {
		out[i] = Range{Prefix: netip.MustParsePrefix(l.cidr), Why: l.why, Fixed: l.fixed}
	}
	return out
}()

// Ranges returns the blocked ranges (a copy), for documentation and the
// compliance evidence.
func Ranges() []Range { return append([]Range(nil), ranges...) }

// Check returns a *Blocked error when a may not be connected to, nil when
// it may. allow lists ranges that open blocked ones (never for a zoned
// address); ParseAllowance, which reads the operator's setting, refuses
// the fixed ranges, so only a test can inject those.
func Check(a netip.Addr, allow []netip.Prefix) error {
	if !a.IsValid() {
		return &Blocked{Why: "invalid address"}
	}
	zone := a.Zone()
	a = a.WithZone("").Unmap()
	if zone != "" {
		why := "zoned address"
		if r, ok := find(a); ok {
			why = "zoned " + r.Why
		}
		return &Blocked{Addr: a, Zone: zone, Why: why}
	}
	r, ok := find(a)
	if !ok {
		return nil
	}
	for _, p := range allow {
		if p.Contains(a) {
			return nil
		}
	}
	return &Blocked{Addr: a, Why: r.Why}
}

func find(a netip.Addr) (Range, bool) {
	for _, r := range ranges {
		if r.Prefix.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}

// CheckHost checks host when it is an address literal (brackets and a
// zone allowed in the input, as in a URL: "[fe80::1%25eth0]" and
// "fe80::1%eth0" are both refused); a name is not resolved here and
// passes (the Dialer checks what it resolves to).
func CheckHost(host string, allow []netip.Prefix) error {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if i := strings.Index(h, "%25"); i >= 0 && strings.Contains(h[:i], ":") {
		h = h[:i] + "%" + h[i+3:]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return Check(a, allow)
	}
	if strings.Contains(h, "%") {
		// Not a literal netip reads, but something with a zone mark:
		// refused rather than guessed at.
		return &Blocked{Why: "zoned address", Host: host}
	}
	return nil
}

// ParseAllowance reads an operator's comma-separated list of ranges to
// open (STOCKADE_EGRESS_ALLOW_CIDRS); a bare address is its own /32 or
// /128. A range overlapping a fixed one (loopback, unspecified, metadata)
// is an error: that can only be injected by a test, never configured.
func ParseAllowance(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var p netip.Prefix
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("address allowance %q: %w", f, err)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("address allowance %q: a zoned address cannot be allowed", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		} else {
			var err error
			if p, err = netip.ParsePrefix(f); err != nil {
				return nil, fmt.Errorf("address allowance %q: %w", f, err)
			}
			p = p.Masked()
		}
		for _, r := range ranges {
			if r.Fixed && r.Prefix.Overlaps(p) {
				return nil, fmt.Errorf("address allowance %q: overlaps %s (%s), which is never allowed", f, r.Prefix, r.Why)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Control is a net.Dialer Control function refusing blocked addresses:
// it sees the address about to be connected, after name resolution.
func Control(allow []netip.Prefix) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &Blocked{Why: "unreadable address", Host: address}
		}
		return Check(ap.Addr(), allow)
	}
}

// Dialer returns a net.Dialer with timeout whose every connection is
// checked by Control(allow).
func Dialer(timeout time.Duration, allow []netip.Prefix) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: Control(allow)}
}

// DialContext is a checked dial for an http.Transport.
func DialContext(timeout time.Duration, allow []netip.Prefix) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return Dialer(timeout, allow).DialContext
}
