package handlers

import (
	"errors"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/errdefs"
)

// TestOperatorPeriod: the period of the operators' usage page and export:
// this month by default, dates with an inclusive end, RFC 3339 times as
// they are, and a 400 naming the field otherwise.
func TestOperatorPeriod(t *testing.T) {
	now := time.Date(2026, 11, 20, 15, 4, 5, 0, time.UTC)
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		name, from, to     string
		wantFrom, wantTo   time.Time
		wantField          string
		wantLabel, wantQry string
	}{
		{"default: this month", "", "", day(2026, 11, 1), day(2026, 12, 1), "", "November 2026", "from=2026-11-01&to=2026-11-30"},
		{"only from: its month", "2026-02-01", "", day(2026, 2, 1), day(2026, 3, 1), "", "February 2026", "from=2026-02-01&to=2026-02-28"},
		{"dates, to inclusive", "2026-11-03", "2026-11-05", day(2026, 11, 3), day(2026, 11, 6), "", "2026-11-03 to 2026-11-05", "from=2026-11-03&to=2026-11-05"},
		{"one day", "2026-11-03", "2026-11-03", day(2026, 11, 3), day(2026, 11, 4), "", "2026-11-03 to 2026-11-03", "from=2026-11-03&to=2026-11-03"},
		{"times as they are", "2026-11-03T10:00:00+01:00", "2026-11-03T12:30:00Z", time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 3, 12, 30, 0, 0, time.UTC), "", "2026-11-03 to 2026-11-03", "from=2026-11-03T09%3A00%3A00Z&to=2026-11-03T12%3A30%3A00Z"},
		{"year boundary", "2026-12-01", "", day(2026, 12, 1), day(2027, 1, 1), "", "December 2026", "from=2026-12-01&to=2026-12-31"},
		{"bad from", "last week", "", time.Time{}, time.Time{}, "from", "", ""},
		{"bad to", "", "2026-02-30", time.Time{}, time.Time{}, "to", "", ""},
		{"backwards", "2026-11-10", "2026-11-01", time.Time{}, time.Time{}, "to", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := operatorPeriod(now, tc.from, tc.to)
			if tc.wantField != "" {
				var me *errdefs.MalformedError
				if !errors.As(err, &me) || me.Field != tc.wantField || !errors.Is(err, errdefs.ErrMalformed) {
					t.Fatalf("Got(operatorPeriod(%q, %q)) = %v, %v; want a malformed %s", tc.from, tc.to, r, err, tc.wantField)
				}
				return
			}
			if err != nil || !r.From.Equal(tc.wantFrom) || !r.To.Equal(tc.wantTo) {
				t.Fatalf("Got(operatorPeriod(%q, %q)) = %v to %v, %v; want %v to %v", tc.from, tc.to, r.From, r.To, err, tc.wantFrom, tc.wantTo)
			}
			if got := opPeriodLabel(r); got != tc.wantLabel {
				t.Errorf("Got(opPeriodLabel) = %q; want %q", got, tc.wantLabel)
			}
			if got := opPeriodQuery(r).Encode(); got != tc.wantQry {
				t.Errorf("Got(opPeriodQuery) = %q; want %q", got, tc.wantQry)
			}
		})
	}
}
