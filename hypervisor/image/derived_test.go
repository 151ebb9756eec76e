package image

import (
	"context"
	"os"
	"testing"
)

// TestDerivedTemplateInputs: node and build are versioned by debian's
// inputs plus their packages, so each has its own version, a change of the
// Debian inputs rebuilds all three, and debian's own version is what it
// was before node and build existed (no "packages" input).
func TestDerivedTemplateInputs(t *testing.T) {
	if _, err := aptMirror(hostSuite()); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI and no Debian mirror in /etc/apt: %v", err)
		}
		t.Skipf("no Debian mirror in /etc/apt: %v", err)
	}
	b := &builder{}
	versions := map[string]string{}
	for _, tt := range []struct {
		name, packages string
	}{
		{TemplateDebian, ""},
		{TemplateNode, "nodejs,npm"},
		{TemplateBuild, "make,gcc,g++,libc6-dev,pkg-config"},
	} {
		in, err := b.templateInputs(context.Background(), tt.name, debPackage{})
		if err != nil {
			t.Fatalf("templateInputs(%s) = %v", tt.name, err)
		}
		if in["packages"] != tt.packages {
			t.Errorf("Got(%s inputs packages) = %q; want %q", tt.name, in["packages"], tt.packages)
		}
		if got, want := in["file:etc/npmrc"] != "", tt.name == TemplateNode; got != want {
			t.Errorf("Got(%s inputs have file:etc/npmrc) = %v; want %v", tt.name, got, want)
		}
		if in["suite"] == "" || in["mirror"] == "" || in["debootstrap"] == "" {
			t.Errorf("Got(%s inputs) = %v; want debian's suite, mirror and debootstrap version", tt.name, in)
		}
		v := versionOf(in)
		for other, ov := range versions {
			if ov == v {
				t.Errorf("Got(version of %s) = %s, the same as %s's; want its own", tt.name, v, other)
			}
		}
		versions[tt.name] = v
	}
}
