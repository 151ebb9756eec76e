package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	usagestore "github.com/stockade-dev/stockade/tenants/usage"
	"github.com/stockade-dev/stockade/web/webtest"
)

// TestUsageCommands: `stockade usage export` streams the API's export to
// stdout or a file (nothing left behind when refused), `usage summary`
// prints the totals; a developer's token is refused and a bad date named.
func TestUsageCommands(t *testing.T) {
	e := webtest.New(t, webtest.Options{DB: dbtest.SQLite(t)})
	tn := e.TenantNamed(t, "cli-usage", "CLI Usage")
	month := usagestore.MonthStart(time.Now())
	sb := uuid.NewString()
	webtest.Meter(t, e.DB, webtest.Run{TenantID: tn.ID, SandboxID: sb, Template: "busybox", UserID: "u1", UserName: "ada@cli.test",
		VCPUs: 2, MemoryMiB: 512, Start: month.Add(90 * time.Minute), For: time.Hour, Cores: 0.5, UsedMiB: 100, EgressDown: 2_000_000})
	billing := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleBilling)})
	developer := env(map[string]string{"STOCKADE_URL": e.URL, "STOCKADE_TOKEN": e.Token(t, tn, tenants.RoleDeveloper)})

	out, _, err := cli(t, billing, "usage", "export", "--format", "csv")
	if err != nil {
		t.Fatalf("usage export: %v", err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) < 2 || !slices.Equal(recs[0], usagestore.Columns) {
		t.Fatalf("Got(usage export stdout) = %d records, %v; want the header and rows: %.300s", len(recs), err, out)
	}
	col := slices.Index(usagestore.Columns, "ResourceId")
	for _, r := range recs[1:] {
		if r[col] != sb {
			t.Errorf("Got(ResourceId) = %s; want %s", r[col], sb)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "nov.json")
	_, stderr, err := cli(t, billing, "usage", "export", "--format", "json", "--from", month.Format(time.DateOnly), "--output", file)
	if err != nil || !strings.Contains(stderr, "wrote") {
		t.Fatalf("Got(usage export --output) = %v, %q; want the file written", err, stderr)
	}
	b, err := os.ReadFile(file)
	var rows []map[string]any
	if err == nil {
		err = json.Unmarshal(b, &rows)
	}
	if err != nil || len(rows) != len(recs)-1 {
		t.Errorf("Got(JSON export file) = %d rows, %v; want %d as in the CSV", len(rows), err, len(recs)-1)
	}

	out, _, err = cli(t, billing, "usage", "summary")
	if err != nil || !strings.Contains(out, "Usage of cli-usage") || !strings.Contains(out, "vCPU-hours      2.00") || !strings.Contains(out, sb) {
		t.Errorf("Got(usage summary) = %v\n%s; want 2.00 vCPU-hours and the sandbox", err, out)
	}

	tests := []struct {
		name    string
		getenv  func(string) string
		args    []string
		wantErr string
	}{
		{"developer cannot export", developer, []string{"usage", "export", "--output", filepath.Join(dir, "refused.csv")}, "403"},
		{"bad from", billing, []string{"usage", "export", "--from", "last tuesday", "--output", filepath.Join(dir, "bad.csv")}, "from"},
		{"bad to", billing, []string{"usage", "summary", "--to", "2026-02-30"}, "to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := cli(t, tc.getenv, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Got(%v) err = %v; want one mentioning %s", tc.args, err, tc.wantErr)
			}
		})
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("Got(files after refused exports) = %v; want only nov.json", left)
	}
}
