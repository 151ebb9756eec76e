package csvexport_test

import (
	"encoding/csv"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/tenants/csvexport"
)

// TestWriterDefusesFormulas: every cell starting with = + - @ TAB or CR is
// written with a leading single quote; other cells, quotes and commas stay
// as encoding/csv writes them; the caller's record is not changed.
func TestWriterDefusesFormulas(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`=cmd|' /C calc'!A0`, `'=cmd|' /C calc'!A0`},
		{"+1+1", "'+1+1"},
		{"-2+3", "'-2+3"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t=1"},
		{"\r=1", "'\r=1"},
		{"", ""},
		{"plain", "plain"},
		{"a=b", "a=b"},
		{"'quoted", "'quoted"},
		{`{"k":"=v"}`, `{"k":"=v"}`},
		{"0.0150", "0.0150"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var b strings.Builder
			w := csvexport.NewWriter(&b)
			rec := []string{"first", tc.in, "last"}
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if err := w.Error(); err != nil {
				t.Fatal(err)
			}
			got, err := csv.NewReader(strings.NewReader(b.String())).Read()
			if err != nil {
				t.Fatalf("read back %q: %v", b.String(), err)
			}
			if len(got) != 3 || got[1] != tc.want || got[0] != "first" || got[2] != "last" {
				t.Errorf("Got(cells of %q) = %q; want [first %q last]", tc.in, got, tc.want)
			}
			if rec[1] != tc.in {
				t.Errorf("Got(caller's record after Write) = %q; want it unchanged (%q)", rec[1], tc.in)
			}
			if csvexport.Cell(tc.in) != tc.want {
				t.Errorf("Got(Cell(%q)) = %q; want %q", tc.in, csvexport.Cell(tc.in), tc.want)
			}
		})
	}
}
