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
		doc := parse(t, render(t, Policy(samplePageModel("Policy", "policy"), samplePolicyView(canEdit))))
		input := byID(doc, "p-resources-max_memory_mib")
		if input == nil {
			t.Fatalf("Got(no #p-resources-max_memory_mib, canEdit %v); want the input", canEdit)
		}
		if v, _ := attr(input, "aria-invalid"); v != "true" {
			t.Errorf("Got(aria-invalid, canEdit %v) = %q; want true", canEdit, v)
		}
		desc, _ := attr(input, "aria-describedby")
		if msg := byID(doc, desc); desc != "p-resources-max_memory_mib-error" || msg == nil || text(msg) != "must be >= 16 but found -1" {
			t.Errorf("Got(aria-describedby %q, canEdit %v); want the field's error message", desc, canEdit)
		}
		if byID(doc, "resources-preview") == nil {
			t.Errorf("Got(no #resources-preview, canEdit %v); want the section's preview", canEdit)
		}
		if got := text(byID(doc, "policy-current").Parent); !strings.Contains(got, "“GitHub <only>”") || len(all(doc, tag("only"))) > 0 {
			t.Errorf("Got(current version line) = %q; want the reason as text, not markup", got)
		}
		v1 := byTestID(doc, "policy-version-1")
		if v1 == nil || !hrefs(v1)["/policy/versions/1"] {
			t.Errorf("Got(version 1 row, canEdit %v) without a link to /policy/versions/1", canEdit)
		}
		if got := textOf(t, doc, "policy-version-0"); !strings.Contains(got, "version 0 (defaults)") {
			t.Errorf("Got(version 0 row) = %q; want it named the defaults", got)
		}
		if got := textOf(t, byTestID(doc, "policy-version-2"), "policy-version-reason"); got != "(roll back to version 0)" {
			t.Errorf("Got(version 2 reason) = %q; want the rollback it copied", got)
		}
		if got := len(all(doc, testID("policy-save"))) > 0; got != canEdit {
			t.Errorf("Got(save button present, canEdit %v) = %v; want %v", canEdit, got, canEdit)
		}
		disabled := 0
		for _, fs := range all(doc, tag("fieldset")) {
			if _, ok := attr(fs, "disabled"); ok {
				disabled++
			}
		}
		if got := disabled > 0; got == canEdit {
			t.Errorf("Got(fieldset disabled, canEdit %v) = %v; want %v", canEdit, got, !canEdit)
		}
	}
}
