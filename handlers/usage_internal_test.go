package handlers

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

func TestUsagePeriodOf(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	d := func(s string) time.Time {
		t.Helper()
		x, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	tests := []struct {
		query     string
		from, to  string
		field     string // the field a 400 names
		wantLabel string
	}{
		{"", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "", "November 2026"},
		{"from=2026-10-01&to=2026-10-31", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", "", "October 2026"},
		{"from=2026-02-01", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", "", "February 2026"},
		{"to=2026-02-10", "2026-02-01T00:00:00Z", "2026-02-11T00:00:00Z", "", "2026-02-01 to 2026-02-10"},
		{"from=2026-11-05&to=2026-11-05", "2026-11-05T00:00:00Z", "2026-11-06T00:00:00Z", "", "2026-11-05 to 2026-11-05"},
		{"from=2026-11-05T10:30:00%2B02:00&to=2026-11-05T12:00:00Z", "2026-11-05T08:30:00Z", "2026-11-05T12:00:00Z", "", "2026-11-05T08:30:00Z to 2026-11-05T12:00:00Z"},
		{"from=tomorrow", "", "", "from", ""},
		{"to=2026-11-31", "", "", "to", ""},
		{"from=2026-11-05&to=2026-11-04", "", "", "to", ""},
		{"from=2025-01-01&to=2026-06-01", "", "", "to", ""},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			c := echo.New().NewContext(httptest.NewRequest("GET", "/usage?"+tc.query, nil), httptest.NewRecorder())
			r, err := usagePeriodOf(c, now, usageMaxSpan)
			if tc.field != "" {
				var me *errdefs.MalformedError
				if !errors.As(err, &me) || !errors.Is(err, errdefs.ErrMalformed) || me.Field != tc.field {
					t.Fatalf("Got(usagePeriodOf(%s)) err = %v; want malformed %s", tc.query, err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("Got(usagePeriodOf(%s)) err = %v; want nil", tc.query, err)
			}
			if !r.From.Equal(d(tc.from)) || !r.To.Equal(d(tc.to)) {
				t.Errorf("Got(usagePeriodOf(%s)) = %s to %s; want %s to %s", tc.query, r.From, r.To, tc.from, tc.to)
			}
			if got := periodLabel(r); got != tc.wantLabel {
				t.Errorf("Got(periodLabel) = %q; want %q", got, tc.wantLabel)
			}
		})
	}
}

func TestSamplePoints(t *testing.T) {
	t0 := time.Date(2026, 11, 3, 8, 0, 0, 0, time.UTC)
	samples := []usage.SampleRow{
		{At: t0, CPUNS: 0, MemoryCurrentBytes: 64 << 20},
		{At: t0.Add(5 * time.Second), CPUNS: 10e9, MemoryCurrentBytes: 128 << 20},           // 2 vCPUs busy
		{At: t0.Add(10 * time.Second), CPUNS: 12_500_000_000, MemoryCurrentBytes: 96 << 20}, // half a vCPU
		{At: t0.Add(10 * time.Second), CPUNS: 13e9},                                         // same instant: no CPU point
	}
	cpu, mem := samplePoints(samples)
	if len(cpu) != 2 || cpu[0].Value != 2 || cpu[1].Value != 0.5 || !cpu[1].At.Equal(t0.Add(10*time.Second)) {
		t.Errorf("Got(cpu points) = %+v; want 2 then 0.5 vCPUs", cpu)
	}
	if len(mem) != 4 || mem[0].Value != 64 || mem[1].Value != 128 {
		t.Errorf("Got(memory points) = %+v; want 64, 128, 96, 0 MiB", mem)
	}
}
