package hypervisor

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"libvirt.org/go/libvirtxml"
)

// Domain types: "kvm" needs a working /dev/kvm on the libvirt host, "qemu"
// is TCG software emulation and always works (slowly).
const (
	TypeKVM  = "kvm"
	TypeQEMU = "qemu"
)

// MetadataNamespace is the XML namespace of our <metadata> element. A domain
// carrying it was made by some Stockade installation; the installation id in
// it says which one.
const (
	MetadataNamespace = "https://stockade.dev/xmlns/vm/1"
	metadataPrefix    = "stockade"
	namePrefix        = "stockade-"
)

// DefaultTBCacheMiB caps QEMU's TCG translation cache when the spec leaves it
// at zero: without a cap QEMU's RSS grows towards 1.4 GB under process churn.
const DefaultTBCacheMiB = 256

// DomainSpec is everything needed to define one VM. It holds ids and paths
// on the libvirt host, never secrets.
type DomainSpec struct {
	ID             string // our VM id; the domain is named DomainName(ID)
	TenantID       string
	InstallationID string // filled from the Host's Config when empty
	VCPUs          int
	MemoryMiB      int
	Type           string // TypeQEMU or TypeKVM; Host.Create fills it when empty

	Kernel    string // uncompressed vmlinux, booted directly (PVH)
	Initramfs string
	Cmdline   string
	Disks     []Disk

	ChannelName string // virtio-serial port name, e.g. "org.stockade.agent.0"
	ConsoleLog  string // serial console to this file; empty: a pty (OpenConsole)
	TBCacheMiB  int    // TCG only; 0 means DefaultTBCacheMiB
}

// Disk is a file-backed virtio disk.
type Disk struct {
	Path     string
	Target   string // "vdb", "vdc", ...
	ReadOnly bool
	Format   string // "raw" when empty
	// Discard passes the guest's discards (fstrim) down to the file,
	// punching holes in it: a sparse scratch disk shrinks again.
	Discard bool
}

// DomainName is the libvirt name of the VM with this id. It is derived from
// ids only, so two installations sharing a libvirtd must also use distinct
// VM ids (ours are random UUIDs).
func DomainName(id string) string { return namePrefix + id }

// idFromName is the inverse of DomainName; ok is false for foreign names.
func idFromName(name string) (string, bool) {
	if !strings.HasPrefix(name, namePrefix) {
		return "", false
	}
	return strings.TrimPrefix(name, namePrefix), true
}

var (
	validID     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	validTarget = regexp.MustCompile(`^vd[a-z]{1,2}$`)
	validPort   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
)

// vmMetadata is the element we put under <metadata>. Marshalled with an
// explicit prefix so `virsh dumpxml` shows stockade:vm, read back through
// the namespace.
type vmMetadata struct {
	XMLName      xml.Name `xml:"stockade:vm"`
	XMLNS        string   `xml:"xmlns:stockade,attr"`
	Installation string   `xml:"stockade:installation"`
	Tenant       string   `xml:"stockade:tenant"`
	VM           string   `xml:"stockade:id"`
}

// vmMetadataIn reads what vmMetadata wrote. libvirt selects the element by
// namespace URI and hands it back with the namespace stripped, so local
// names are matched in any namespace.
type vmMetadataIn struct {
	XMLName      xml.Name `xml:"vm"`
	Installation string   `xml:"installation"`
	Tenant       string   `xml:"tenant"`
	VM           string   `xml:"id"`
}

// identity is who a domain belongs to, as read from its metadata.
type identity struct {
	ID, TenantID, InstallationID string
}

func marshalMetadata(id identity) (string, error) {
	out, err := xml.Marshal(vmMetadata{
		XMLNS:        MetadataNamespace,
		Installation: id.InstallationID,
		Tenant:       id.TenantID,
		VM:           id.ID,
	})
	if err != nil {
		return "", fmt.Errorf("marshal metadata: %w", err)
	}
	return string(out), nil
}

func parseMetadata(s string) (identity, error) {
	var m vmMetadataIn
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return identity{}, fmt.Errorf("parse metadata: %w", err)
	}
	if m.Installation == "" || m.VM == "" {
		return identity{}, fmt.Errorf("parse metadata: installation or id missing")
	}
	return identity{ID: m.VM, TenantID: m.Tenant, InstallationID: m.Installation}, nil
}

func (s DomainSpec) validate() error {
	var problems []string
	if !validID.MatchString(s.ID) {
		problems = append(problems, fmt.Sprintf("id %q must be 1-63 of [A-Za-z0-9._-]", s.ID))
	}
	if s.InstallationID == "" {
		problems = append(problems, "installation id is empty")
	}
	if s.Type != TypeQEMU && s.Type != TypeKVM {
		problems = append(problems, fmt.Sprintf("type %q is neither %q nor %q", s.Type, TypeQEMU, TypeKVM))
	}
	if s.VCPUs < 1 {
		problems = append(problems, fmt.Sprintf("vcpus %d < 1", s.VCPUs))
	}
	if s.MemoryMiB < 16 {
		problems = append(problems, fmt.Sprintf("memory %d MiB < 16", s.MemoryMiB))
	}
	if s.TBCacheMiB < 0 {
		problems = append(problems, fmt.Sprintf("tb-cache %d MiB < 0", s.TBCacheMiB))
	}
	if !filepath.IsAbs(s.Kernel) {
		problems = append(problems, fmt.Sprintf("kernel %q is not an absolute path", s.Kernel))
	}
	if s.Initramfs != "" && !filepath.IsAbs(s.Initramfs) {
		problems = append(problems, fmt.Sprintf("initramfs %q is not an absolute path", s.Initramfs))
	}
	if s.ConsoleLog != "" && !filepath.IsAbs(s.ConsoleLog) {
		problems = append(problems, fmt.Sprintf("console log %q is not an absolute path", s.ConsoleLog))
	}
	if s.ChannelName != "" && !validPort.MatchString(s.ChannelName) {
		problems = append(problems, fmt.Sprintf("channel name %q", s.ChannelName))
	}
	seen := map[string]bool{}
	for _, d := range s.Disks {
		if !filepath.IsAbs(d.Path) {
			problems = append(problems, fmt.Sprintf("disk path %q is not absolute", d.Path))
		}
		if !validTarget.MatchString(d.Target) || seen[d.Target] {
			problems = append(problems, fmt.Sprintf("disk target %q is invalid or repeated", d.Target))
		}
		seen[d.Target] = true
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// BuildDomain turns a spec into libvirt's domain definition. It is pure: the
// same spec always gives the same XML (golden tests in testdata/).
//
// The VM boots the kernel directly, has no network device at all (egress goes
// through the agent channel), reports crashes by stopping, and returns freed
// memory to the host through the balloon's free page reporting.
func BuildDomain(s DomainSpec) (*libvirtxml.Domain, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("build domain %s: %w", s.ID, err)
	}
	meta, err := marshalMetadata(identity{ID: s.ID, TenantID: s.TenantID, InstallationID: s.InstallationID})
	if err != nil {
		return nil, fmt.Errorf("build domain %s: %w", s.ID, err)
	}

	features := &libvirtxml.DomainFeatureList{
		ACPI: &libvirtxml.DomainFeature{}, // the guest powers off and sees the power button
		APIC: &libvirtxml.DomainFeatureAPIC{},
	}
	var cpu *libvirtxml.DomainCPU
	switch s.Type {
	case TypeQEMU:
		tb := s.TBCacheMiB
		if tb == 0 {
			tb = DefaultTBCacheMiB
		}
		features.TCG = &libvirtxml.DomainFeatureTCG{
			TBCache: &libvirtxml.DomainFeatureTCGTBCache{Unit: "MiB", Size: uint(tb)},
		}
	case TypeKVM:
		cpu = &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none", Migratable: "on"}
	}

	disks := make([]libvirtxml.DomainDisk, 0, len(s.Disks))
	for _, d := range s.Disks {
		format := d.Format
		if format == "" {
			format = "raw"
		}
		disk := libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: d.Path}},
			Target: &libvirtxml.DomainDiskTarget{Dev: d.Target, Bus: "virtio"},
		}
		if d.ReadOnly {
			disk.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
		}
		if d.Discard {
			disk.Driver.Discard = "unmap"
		}
		disks = append(disks, disk)
	}

	serialSource := &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}}
	if s.ConsoleLog != "" {
		serialSource = &libvirtxml.DomainChardevSource{
			File: &libvirtxml.DomainChardevSourceFile{Path: s.ConsoleLog, Append: "off"},
		}
	}
	port := uint(0)

	var channels []libvirtxml.DomainChannel
	controllers := []libvirtxml.DomainController{
		{Type: "usb", Model: "none"}, // nothing to plug in; saves a device under TCG
	}
	if s.ChannelName != "" {
		zero := uint(0)
		controllers = append(controllers, libvirtxml.DomainController{Type: "virtio-serial", Index: &zero})
		channels = append(channels, libvirtxml.DomainChannel{
			// No path: libvirt picks one under its own run directory and
			// removes it with the domain. We reach it via OpenChannel only.
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
			Target: &libvirtxml.DomainChannelTarget{
				VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: s.ChannelName},
			},
		})
	}

	dom := &libvirtxml.Domain{
		Type:     s.Type,
		Name:     DomainName(s.ID),
		Metadata: &libvirtxml.DomainMetadata{XML: meta},
		Memory:   &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Placement: "static", Value: uint(s.VCPUs)},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
			Kernel:  s.Kernel,
			Initrd:  s.Initramfs,
			Cmdline: s.Cmdline,
		},
		Features:   features,
		CPU:        cpu,
		OnPoweroff: "destroy",
		OnReboot:   "destroy", // a guest reboot (panic=-1) ends the VM; the pool boots a fresh one
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks:       disks,
			Controllers: controllers,
			Serials: []libvirtxml.DomainSerial{{
				Source: serialSource,
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
			}},
			Channels: channels,
			MemBalloon: &libvirtxml.DomainMemBalloon{
				Model:             "virtio",
				FreePageReporting: "on",
			},
		},
	}
	return dom, nil
}
