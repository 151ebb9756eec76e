package hypervisor

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.xml golden files")

func baseSpec() DomainSpec {
	return DomainSpec{
		ID:             "0b6c9e0e-3f1a-4f59-9d7e-5a1d3c2b1a00",
		TenantID:       "tenant-7",
		InstallationID: "inst-42",
		VCPUs:          1,
		MemoryMiB:      512,
		Type:           TypeQEMU,
		Kernel:         "/var/lib/stockade/images/v1/vmlinux",
		Initramfs:      "/var/lib/stockade/images/v1/initramfs.cpio",
		Cmdline:        "console=ttyS0 quiet panic=-1",
		ChannelName:    "org.stockade.agent.0",
		ConsoleLog:     "/var/lib/stockade/vms/0b6c9e0e/console.log",
	}
}

func TestBuildDomainGolden(t *testing.T) {
	tests := []struct {
		name string
		edit func(*DomainSpec)
	}{
		{"qemu", func(s *DomainSpec) {}},
		{"qemu-tbcache-disks", func(s *DomainSpec) {
			s.TBCacheMiB = 128
			s.VCPUs = 2
			s.Disks = []Disk{
				{Path: "/var/lib/stockade/templates/busybox.ext4", Target: "vdb", ReadOnly: true},
				{Path: "/var/lib/stockade/vms/0b6c9e0e/scratch.qcow2", Target: "vdc", Format: "qcow2", Discard: true},
			}
		}},
		{"kvm", func(s *DomainSpec) { s.Type = TypeKVM; s.MemoryMiB = 1024 }},
		{"kvm-pty-console-no-channel", func(s *DomainSpec) {
			s.Type = TypeKVM
			s.ConsoleLog = ""
			s.ChannelName = ""
			s.Initramfs = ""
		}},
		{"metadata-escaping", func(s *DomainSpec) { s.TenantID = `a<b>&"c"` }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := baseSpec()
			tt.edit(&spec)
			dom, err := BuildDomain(spec)
			if err != nil {
				t.Fatalf("BuildDomain(%s) error = %v; want nil", tt.name, err)
			}
			got, err := dom.Marshal()
			if err != nil {
				t.Fatalf("Marshal() error = %v", err)
			}
			got += "\n"
			path := filepath.Join("testdata", tt.name+".xml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create): %v", err)
			}
			if got != string(want) {
				t.Errorf("BuildDomain(%s) XML differs from %s (run with -update after checking):\ngot:\n%s\nwant:\n%s", tt.name, path, got, want)
			}

			// The XML must parse back, and keep what matters.
			var back libvirtxml.Domain
			if err := back.Unmarshal(got); err != nil {
				t.Fatalf("Unmarshal(golden) error = %v", err)
			}
			if back.Devices == nil || len(back.Devices.Interfaces) != 0 {
				t.Errorf("Got(interfaces) = %v; want none", back.Devices.Interfaces)
			}
			if back.OnCrash != "destroy" {
				t.Errorf("Got(on_crash) = %q; want destroy", back.OnCrash)
			}
			ident, err := parseMetadata(back.Metadata.XML)
			if err != nil {
				t.Fatalf("parseMetadata() error = %v", err)
			}
			want2 := identity{ID: spec.ID, TenantID: spec.TenantID, InstallationID: spec.InstallationID}
			if ident != want2 {
				t.Errorf("Got(metadata) = %+v; want %+v", ident, want2)
			}
		})
	}
}

func TestBuildDomainInvalid(t *testing.T) {
	tests := []struct {
		name string
		edit func(*DomainSpec)
		want string
	}{
		{"empty id", func(s *DomainSpec) { s.ID = "" }, "id"},
		{"id with slash", func(s *DomainSpec) { s.ID = "../x" }, "id"},
		{"no installation", func(s *DomainSpec) { s.InstallationID = "" }, "installation"},
		{"bad type", func(s *DomainSpec) { s.Type = "xen" }, "type"},
		{"empty type", func(s *DomainSpec) { s.Type = "" }, "type"},
		{"no vcpus", func(s *DomainSpec) { s.VCPUs = 0 }, "vcpus"},
		{"tiny memory", func(s *DomainSpec) { s.MemoryMiB = 1 }, "memory"},
		{"relative kernel", func(s *DomainSpec) { s.Kernel = "vmlinux" }, "kernel"},
		{"relative initramfs", func(s *DomainSpec) { s.Initramfs = "initrd" }, "initramfs"},
		{"relative disk", func(s *DomainSpec) { s.Disks = []Disk{{Path: "x.img", Target: "vdb"}} }, "disk path"},
		{"bad disk target", func(s *DomainSpec) { s.Disks = []Disk{{Path: "/x.img", Target: "sda"}} }, "disk target"},
		{"repeated disk target", func(s *DomainSpec) {
			s.Disks = []Disk{{Path: "/a.img", Target: "vdb"}, {Path: "/b.img", Target: "vdb"}}
		}, "disk target"},
		{"bad channel name", func(s *DomainSpec) { s.ChannelName = "a b" }, "channel"},
		{"negative tb-cache", func(s *DomainSpec) { s.TBCacheMiB = -1 }, "tb-cache"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := baseSpec()
			tt.edit(&spec)
			_, err := BuildDomain(spec)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("BuildDomain(%s) error = %v; want ErrInvalid", tt.name, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BuildDomain(%s) error = %q; want it to mention %q", tt.name, err, tt.want)
			}
		})
	}
}

func TestDomainName(t *testing.T) {
	tests := []struct{ id, want string }{
		{"abc", "stockade-abc"},
		{"0b6c9e0e-3f1a", "stockade-0b6c9e0e-3f1a"},
	}
	for _, tt := range tests {
		if got := DomainName(tt.id); got != tt.want {
			t.Errorf("DomainName(%q) = %q; want %q", tt.id, got, tt.want)
		}
		if id, ok := idFromName(DomainName(tt.id)); !ok || id != tt.id {
			t.Errorf("idFromName(DomainName(%q)) = %q, %v; want %q, true", tt.id, id, ok, tt.id)
		}
	}
	if _, ok := idFromName("test"); ok {
		t.Errorf("idFromName(%q) ok = true; want false", "test")
	}
}

func TestParseMetadata(t *testing.T) {
	want := identity{ID: "v", TenantID: "t", InstallationID: "i"}
	tests := []struct {
		name, in string
		ok       bool
	}{
		// virDomainGetMetadata returns the element with its namespace stripped.
		{"as libvirt returns it", `<vm><installation>i</installation><tenant>t</tenant><id>v</id></vm>`, true},
		{"with a prefix", `<x:vm xmlns:x="https://stockade.dev/xmlns/vm/1"><x:installation>i</x:installation><x:tenant>t</x:tenant><x:id>v</x:id></x:vm>`, true},
		{"no installation", `<vm><tenant>t</tenant><id>v</id></vm>`, false},
		{"no id", `<vm><installation>i</installation></vm>`, false},
		{"other element", `<machine><installation>i</installation><id>v</id></machine>`, false},
		{"not xml", `{"installation":"i"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMetadata(tt.in)
			if tt.ok && (err != nil || got != want) {
				t.Errorf("parseMetadata(%s) = %+v, %v; want %+v", tt.in, got, err, want)
			}
			if !tt.ok && err == nil {
				t.Errorf("parseMetadata(%s) = %+v; want an error", tt.in, got)
			}
		})
	}
}
