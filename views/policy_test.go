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
		}, Focus: "p-resources-max_memory_mib",
			Preview: &PolicyPreview{Changes: []PolicyChange{{Path: "/resources/max_memory_mib", Label: "Max memory", Old: "512 MiB", New: "256 MiB"},
				{Path: "/network/egress/allow", Label: "Egress allowlist", List: true, Added: []string{"registry.npmjs.org"}}},
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
		if _, ok := attr(input, "autofocus"); !ok {
			t.Errorf("Got(no autofocus on the field in error, canEdit %v); want the page to land on it", canEdit)
		}
		rows := all(byID(doc, "resources-preview"), testID("policy-change"))
		if len(rows) != 2 || textOf(t, rows[0], "policy-change-label") != "Max memory" || textOf(t, rows[0], "policy-change-new") != "256 MiB" ||
			textOf(t, rows[1], "policy-change-label") != "Egress allowlist" || textOf(t, rows[1], "policy-change-new") != "+ registry.npmjs.org" {
			t.Errorf("Got(%d diff rows, canEdit %v); want Max memory → 256 MiB and Egress allowlist + registry.npmjs.org", len(rows), canEdit)
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

// TestPolicyRollbackPage: the confirm step shows the diff, keeps the typed
// reason, marks a refused one on its field (focused) and posts on the
// version the diff was made against.
func TestPolicyRollbackPage(t *testing.T) {
	v := PolicyRollbackView{CSRF: "tok", Target: PolicyVersionRow{Version: 1, RolledBackFrom: -1}, Current: PolicyVersionRow{Version: 4, Current: true, RolledBackFrom: -1},
		Changes: []PolicyChange{{Path: "/resources/default_memory_mib", Label: "Default memory", Old: "512 MiB", New: "256 MiB"}},
		Reason:  "  ", ReasonError: "say why the policy changes"}
	doc := parse(t, render(t, PolicyRollback(samplePageModel("Roll back", "policy"), v)))
	if got := textOf(t, byTestID(doc, "policy-change"), "policy-change-label"); got != "Default memory" {
		t.Errorf("Got(diff label) = %q; want Default memory", got)
	}
	in := byID(doc, "rollback-reason")
	if in == nil {
		t.Fatal("Got(no #rollback-reason); want the reason input")
	}
	if _, ok := attr(in, "autofocus"); !ok {
		t.Errorf("Got(no autofocus on the refused reason); want it")
	}
	if desc, _ := attr(in, "aria-describedby"); desc != "rollback-reason-error" || text(byID(doc, desc)) != "say why the policy changes" {
		t.Errorf("Got(aria-describedby %q); want the reason's error", desc)
	}
	base := ""
	for _, n := range all(doc, tag("input")) {
		if name, _ := attr(n, "name"); name == "base_version" {
			base, _ = attr(n, "value")
		}
	}
	if base != "4" {
		t.Errorf("Got(base_version) = %q; want 4, the version the diff is against", base)
	}
}
