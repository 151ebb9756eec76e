package views

import (
	"strings"
	"testing"
)

func samplePolicyView(canEdit bool) PolicyView {
	return PolicyView{
		CSRF: "tok", CanEdit: canEdit, Raw: `{"resources": {}}`,
		Current: PolicyVersionRow{Version: 2, Author: "ann@acme.test", Reason: "GitHub <only>", CreatedAt: sampleTime("2026-11-30T10:00:00Z"), Current: true, RolledBackFrom: -1},
		Sections: []PolicySection{{Key: "resources", Title: "Resources", Fields: []PolicyField{
			{Name: "/resources/max_memory_mib", ID: "p-resources-max_memory_mib", Label: "Max memory (MiB)", Kind: FieldInt, Value: "-1",
				Error: "must be >= 16 but found -1"},
			{Name: "/resources/read_only", ID: "p-resources-read_only", Label: "Read only", Kind: FieldBool, Checked: true},
		}, Preview: &PolicyPreview{Changes: []PolicyChange{{Path: "/resources/max_memory_mib", Old: "512", New: "256"}},
			Notes: []string{"Resource and lifetime limits apply to sandboxes created from now on."}}}},
		Versions: []PolicyVersionRow{{Version: 2, Current: true, RolledBackFrom: 0}, {Version: 1, RolledBackFrom: -1}, {Version: 0, RolledBackFrom: -1}},
	}
}

// TestPolicyPage: errors sit next to their inputs and are announced;
// admins get preview and save, others a disabled form; versions link to
// their pages and say which one a rollback copied.
func TestPolicyPage(t *testing.T) {
	for _, canEdit := range []bool{true, false} {
		out := render(t, Policy(samplePageModel("Policy", "policy"), samplePolicyView(canEdit)))
		for _, want := range []string{`id="p-resources-max_memory_mib-error"`, `aria-describedby="p-resources-max_memory_mib-error"`, `aria-invalid="true"`,
			"GitHub &lt;only&gt;", `href="/policy/versions/1"`, "version 0 (defaults)", "(roll back to version 0)", `id="resources-preview"`} {
			if !strings.Contains(out, want) {
				t.Errorf("Got(policy page, canEdit %v) without %q", canEdit, want)
			}
		}
		if got := strings.Contains(out, `value="save"`); got != canEdit {
			t.Errorf("Got(save button present, canEdit %v) = %v; want %v", canEdit, got, canEdit)
		}
		if got := strings.Contains(out, "<fieldset disabled"); got == canEdit {
			t.Errorf("Got(fieldset disabled, canEdit %v) = %v; want %v", canEdit, got, !canEdit)
		}
	}
}
