package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/netguard"
)

func TestCheck(t *testing.T) {
	lo8 := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		addr  string
		allow []netip.Prefix
		want  string // "" for allowed, else the reason's start
	}{
		{"93.184.216.34", nil, ""},
		{"2606:2800:220:1:248:1893:25c8:1946", nil, ""},
		{"8.8.8.8", nil, ""},
		{"127.0.0.1", nil, "loopback address 127.0.0.1"},
		{"127.0.0.1", lo8, ""},
		{"::1", nil, "loopback address ::1"},
		{"::1%lo", nil, "zoned loopback address ::1%lo"},
		{"::1%lo", []netip.Prefix{netip.MustParsePrefix("::1/128")}, "zoned loopback address"},
		{"fe80::1%eth0", nil, "zoned link-local address fe80::1%eth0"},
		{"2606:2800:220:1::1%eth0", nil, "zoned address"},
		{"::ffff:127.0.0.1", nil, "loopback address 127.0.0.1"},
		{"::ffff:169.254.169.254", nil, "cloud metadata address 169.254.169.254"},
		{"::127.0.0.1", nil, "IPv4-compatible address"},
		{"::8.8.8.8", nil, "IPv4-compatible address"},
		{"64:ff9b::7f00:1", nil, "NAT64 address"},
		{"2002:7f00:1::1", nil, "6to4 address"},
		{"2001:0:7f00:1::1", nil, "Teredo address"},
		{"fec0::1", nil, "site-local address"},
		{"0.0.0.0", nil, "unspecified address"},
		{"0.1.2.3", nil, "unspecified address"},
		{"::", nil, "unspecified address"},
		{"192.0.2.1", nil, "documentation address (TEST-NET-1)"},
		{"198.51.100.7", nil, "documentation address (TEST-NET-2)"},
		{"203.0.113.9", nil, "documentation address (TEST-NET-3)"},
		{"2001:db8::1", nil, "documentation address"},
		{"169.254.169.254", nil, "cloud metadata address"},
		{"fd00:ec2::254", nil, "cloud metadata address"},
		{"10.1.2.3", nil, "private address"},
		{"100.64.0.1", nil, "CGNAT address"},
		{"fd12::1", nil, "private address"},
		{"ff02::1", nil, "multicast address"},
		{"224.0.0.1", nil, "multicast address"},
		{"255.255.255.255", nil, "reserved address"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			err := netguard.Check(netip.MustParseAddr(tc.addr), tc.allow)
			if tc.want == "" {
				if err != nil {
					t.Errorf("Got(Check(%s)) = %v; want allowed", tc.addr, err)
				}
				return
			}
			if !errors.Is(err, netguard.ErrBlocked) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("Got(Check(%s)) = %v; want blocked: %q", tc.addr, err, tc.want)
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	tests := []struct {
		host    string
		blocked bool
	}{
		{"api.github.com", false},
		{"93.184.216.34", false},
		{"[2606:2800:220:1::1]", false},
		{"[::1%25lo]", true},
		{"::1%lo", true},
		{"[fe80::1%25eth0]", true},
		{"fe80::1%eth0", true},
		{"[2606:2800:220:1::1%25eth0]", true},
		{"example.com%lo", true},
		{"[::1]", true},
		{"127.0.0.1", true},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			err := netguard.CheckHost(tc.host, nil)
			if got := errors.Is(err, netguard.ErrBlocked); got != tc.blocked {
				t.Errorf("Got(CheckHost(%s)) = %v; want blocked %v", tc.host, err, tc.blocked)
			}
			if err != nil && strings.Contains(err.Error(), "invalid IP") {
				t.Errorf("Got(CheckHost(%s)) = %q; want the refused host named", tc.host, err)
			}
		})
	}
}

func TestParseAllowance(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{" 10.0.0.0/8, fd12::/16 ,192.168.1.5", "10.0.0.0/8 fd12::/16 192.168.1.5/32", ""},
		{"10.1.2.3/8", "10.0.0.0/8", ""},
		{"", "", ""},
		{"127.0.0.0/8", "", "never allowed"},
		{"127.0.0.1", "", "never allowed"},
		{"::1", "", "never allowed"},
		{"0.0.0.0/0", "", "never allowed"},
		{"::/0", "", "never allowed"},
		{"169.254.0.0/16", "", "never allowed"},
		{"fd00:ec2::/32", "", "never allowed"},
		{"fe80::1%eth0", "", "zoned"},
		{"10.0.0.0/33", "", "10.0.0.0/33"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := netguard.ParseAllowance(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Got(ParseAllowance(%q)) = %v, %v; want an error naming %q", tc.in, got, err, tc.err)
				}
				return
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if err != nil || strings.Join(s, " ") != tc.want {
				t.Errorf("Got(ParseAllowance(%q)) = %v, %v; want %s", tc.in, s, err, tc.want)
			}
		})
	}
}

// TestDialer dials real listeners on this host's loopback: the checked
// dialer refuses them by address (a zoned literal included: it would reach
// ::1) before any connection is made, and reaches them under an allowance.
func TestDialer(t *testing.T) {
	accepted := make(chan string, 16)
	listen := func(network, addr string) string {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatalf("listen %s: %v", addr, err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- ln.Addr().String()
				c.Close()
			}
		}()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		return port
	}
	p4 := listen("tcp4", "127.0.0.1:0")
	p6 := listen("tcp6", "[::1]:0")
	tests := []struct {
		addr  string
		allow []netip.Prefix
		ok    bool
	}{
		{"127.0.0.1:" + p4, nil, false},
		{"localhost:" + p4, nil, false},
		{"[::1]:" + p6, nil, false},
		{"[::1%lo]:" + p6, nil, false},
		{"[::1%lo]:" + p6, []netip.Prefix{netip.MustParsePrefix("::/0")}, false},
		{"[::ffff:127.0.0.1]:" + p4, nil, false},
		{"127.0.0.1:" + p4, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, true},
		{"[::1]:" + p6, []netip.Prefix{netip.MustParsePrefix("::1/128")}, true},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := netguard.DialContext(5*time.Second, tc.allow)(ctx, "tcp", tc.addr)
			if tc.ok {
				if err != nil {
					t.Fatalf("Got(dial %s) = %v; want a connection", tc.addr, err)
				}
				c.Close()
				<-accepted
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("Got(dial %s) = a connection; want refused", tc.addr)
			}
			if !errors.Is(err, netguard.ErrBlocked) {
				t.Errorf("Got(dial %s) = %v; want ErrBlocked", tc.addr, err)
			}
			select {
			case a := <-accepted:
				t.Errorf("Got(a connection accepted on %s); want none", a)
			default:
			}
		})
	}
}
