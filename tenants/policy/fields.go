package policy

// Kind is how a setting is edited and read.
type Kind string

// Kinds of Field.
const (
	KindInt   Kind = "int"
	KindBool  Kind = "bool"
	KindEnum  Kind = "enum"
	KindLines Kind = "lines" // a list of strings, one a line
	KindRules Kind = "rules" // a list of egress rules, one a line
	KindText  Kind = "text"  // one line of free text (a URL)
)

// Unit is what an integer setting counts.
type Unit string

// Units of Field.
const (
	UnitNone    Unit = ""
	UnitMiB     Unit = "MiB"
	UnitBytes   Unit = "bytes"
	UnitSeconds Unit = "s"
	UnitHours   Unit = "h"
	UnitDays    Unit = "days"
)

// Field describes one setting of the document for people: the form that
// edits it, the diff that shows its change and the errors that name it
// all take its label from here.
type Field struct {
	Path  string // JSON pointer: /resources/max_memory_mib
	Label string // stands on its own: "Max memory"
	Kind  Kind
	Unit  Unit
	Help  string
	// Zero says what 0 means when it means something else than none
	// ("never"): shown with the value.
	Zero    string
	Options []string
}

// FormLabel is the label with its unit, as an input shows it: "Max memory (MiB)".
func (f Field) FormLabel() string {
	if f.Unit == UnitNone {
		return f.Label
	}
	return f.Label + " (" + string(f.Unit) + ")"
}

// Section is one object of the document.
type Section struct {
	Key    string // resources
	Title  string
	Help   string
	Fields []Field
}

// VMPoolSection is the document's vm_pool: no part of the platform reads
// it; the VM pool runs by the pool settings of the VMs page (vmpool.Pool),
// so the policy page links there instead of offering a second form. It
// stays in the schema so that saved documents remain valid.
const VMPoolSection = "vm_pool"

// Sections describes every setting of the document, in the order the
// policy page shows them. Every leaf of a Doc has exactly one Field
// (TestFieldsCoverDoc).
func Sections() []Section {
	return []Section{
		{"resources", "Resources", "What one sandbox may ask for. Applies to sandboxes created from now on.", []Field{
			{Path: "/resources/max_vcpus", Label: "Max vCPUs", Kind: KindInt},
			{Path: "/resources/max_memory_mib", Label: "Max memory", Kind: KindInt, Unit: UnitMiB},
			{Path: "/resources/default_memory_mib", Label: "Default memory", Kind: KindInt, Unit: UnitMiB, Help: "for a sandbox that asks for none"},
			{Path: "/resources/max_pids", Label: "Max processes", Kind: KindInt},
			{Path: "/resources/max_disk_mib", Label: "Max disk", Kind: KindInt, Unit: UnitMiB},
		}},
		{"lifetime", "Lifetime", "How long one sandbox lives.", []Field{
			{Path: "/lifetime/max_timeout_seconds", Label: "Max lifetime", Kind: KindInt, Unit: UnitSeconds},
			{Path: "/lifetime/default_timeout_seconds", Label: "Default lifetime", Kind: KindInt, Unit: UnitSeconds},
			{Path: "/lifetime/max_idle_timeout_seconds", Label: "Max idle timeout", Kind: KindInt, Unit: UnitSeconds, Zero: "up to the lifetime",
				Help: "0: up to the lifetime"},
		}},
		{"network", "Network egress", "Decided by the host gateway for every connection: changes reach running sandboxes within seconds.", []Field{
			{Path: "/network/egress/default", Label: "Egress to unlisted hosts", Kind: KindEnum, Options: []string{EgressDeny, EgressAllow}},
			{Path: "/network/egress/allow", Label: "Egress allowlist", Kind: KindRules,
				Help: "one rule a line: a host (api.github.com) or a wildcard (*.example.com), then ports (443,8443) or none for all"},
			{Path: "/network/egress/deny", Label: "Egress denylist", Kind: KindRules, Help: "same form; deny wins over allow"},
		}},
		{"filesystem", "Filesystem", "", []Field{
			{Path: "/filesystem/read_only_root", Label: "Read-only template root", Kind: KindBool},
			{Path: "/filesystem/workspace_mib", Label: "Workspace", Kind: KindInt, Unit: UnitMiB},
			{Path: "/filesystem/max_file_bytes", Label: "Max file size through the API", Kind: KindInt, Unit: UnitBytes},
		}},
		{"credentials", "Credentials", "Secrets given to every sandbox as a placeholder in the variable of the same name.", []Field{
			{Path: "/credentials/secrets", Label: "Secrets granted", Kind: KindLines, Help: "one secret name a line"},
		}},
		{"process", "Processes", "", []Field{
			{Path: "/process/allow_root", Label: "Allow root inside the sandbox", Kind: KindBool},
			{Path: "/process/no_new_privileges", Label: "No new privileges", Kind: KindBool},
			{Path: "/process/seccomp", Label: "Seccomp profile", Kind: KindEnum, Options: []string{"default", "strict"}},
		}},
		{"cleanup", "Cleanup", "", []Field{
			{Path: "/cleanup/destroy_stopped_after_seconds", Label: "Destroy stopped sandboxes after", Kind: KindInt, Unit: UnitSeconds},
			{Path: "/cleanup/recording_retention_days", Label: "Keep recordings", Kind: KindInt, Unit: UnitDays},
		}},
		{"audit", "Audit", "", []Field{
			{Path: "/audit/record_commands", Label: "Record commands and their output", Kind: KindBool},
			{Path: "/audit/record_terminal_input", Label: "Record terminal keystrokes", Kind: KindBool},
			{Path: "/audit/retention_days", Label: "Keep audit events", Kind: KindInt, Unit: UnitDays, Zero: "forever"},
		}},
		{"incident_response", "Incident response", "", []Field{
			{Path: "/incident_response/on_egress_denied", Label: "On a denied connection", Kind: KindEnum, Options: []string{"log", "stop_sandbox"}},
			{Path: "/incident_response/notify_emails", Label: "Notify on an incident", Kind: KindLines, Help: "one email address a line"},
			{Path: "/incident_response/runbook_url", Label: "Runbook", Kind: KindText,
				Help: "the runbook for a compromised agent (http or https URL); shown on the compliance page"},
		}},
		{VMPoolSection, "VM pool (document only)", "Not read by the VM pool: its settings are on the VMs page.", []Field{
			{Path: "/vm_pool/sandboxes_per_vm", Label: "VM pool (document only): sandboxes per VM", Kind: KindInt},
			{Path: "/vm_pool/warm_vms", Label: "VM pool (document only): warm VMs", Kind: KindInt},
			{Path: "/vm_pool/recycle_after_sandboxes", Label: "VM pool (document only): recycle after sandboxes", Kind: KindInt, Zero: "never"},
			{Path: "/vm_pool/recycle_after_hours", Label: "VM pool (document only): recycle after", Kind: KindInt, Unit: UnitHours, Zero: "never"},
		}},
	}
}

// FieldAt is the field of a JSON pointer.
func FieldAt(path string) (Field, bool) {
	for _, s := range Sections() {
		for _, f := range s.Fields {
			if f.Path == path {
				return f, true
			}
		}
	}
	return Field{}, false
}

// SectionTitle is the title of the section a JSON pointer is in; the key
// itself when none.
func SectionTitle(key string) string {
	for _, s := range Sections() {
		if s.Key == key {
			return s.Title
		}
	}
	return key
}
