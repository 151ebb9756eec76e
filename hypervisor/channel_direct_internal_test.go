package hypervisor

import "testing"

func TestLocalURI(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want bool
	}{
		{"qemu:///system", true},
		{"qemu:///session", true},
		{"qemu+unix:///system", true},
		{"qemu+unix:///system?socket=/run/libvirt/libvirt-sock", true},
		{"qemu+tcp://127.0.0.1:16509/system", false},
		{"qemu+tcp:///system", false},
		{"qemu+ssh://root@host/system", false},
		{"qemu+tls://host/system", false},
		{"test:///default", false},
		{"", false},
		{"::bad", false},
	} {
		if got := localURI(tc.uri); got != tc.want {
			t.Errorf("localURI(%q) = %v; want %v", tc.uri, got, tc.want)
		}
	}
}
