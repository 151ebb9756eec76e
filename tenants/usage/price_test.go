package usage_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// exportCSV is the rows of the tenant's CSV export over r, and the index
// of each column.
func exportCSV(t *testing.T, st *usage.Store, tenantID string, r usage.Range) ([][]string, map[string]int) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := st.Export(ctx, &buf, usage.ExportQuery{TenantID: tenantID, Range: r, Format: usage.FormatCSV}); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("Got(export) = %d records, %v; want a header and rows", len(recs), err)
	}
	col := map[string]int{}
	for i, c := range recs[0] {
		col[c] = i
	}
	return recs[1:], col
}

// exportCost is the sum of BilledCost of the tenant's CSV export over r,
// read exactly.
func exportCost(t *testing.T, st *usage.Store, tenantID string, r usage.Range) usage.Money {
	t.Helper()
	recs, col := exportCSV(t, st, tenantID, r)
	var sum usage.Money
	for _, rec := range recs {
		c, err := usage.ParseMoney(rec[col["BilledCost"]])
		if err != nil {
			t.Fatalf("Got(BilledCost) = %q: %v; want an exact decimal", rec[col["BilledCost"]], err)
		}
		sum = sum.Add(c)
	}
	return sum
}

// TestPriceNeverReprices: a December whose hours are billed keeps its cost
// whatever price is set in January. A price effective before now is
// refused naming effective_from, and writes nothing (the bug: a price dated
// 2020-01-01 took December from $0.0150 to $0.0237); a price from now or
// later leaves every hour already used, the current one included, at the
// price it had; a replica whose clock is behind the ledger cannot price
// hours that hold usage either.
func TestPriceNeverReprices(t *testing.T) {
	now := time.Date(2027, 1, 15, 12, 20, 0, 0, time.UTC)
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			st := usage.NewStore(d.DB, func() time.Time { return now })
			tn, err := tenants.NewStore(d.DB, nil).CreateTenant(ctx, op, "reprice", "")
			if err != nil {
				t.Fatal(err)
			}
			// The list price of December, set in November.
			priceFrom(t, d.DB, usage.Price{Currency: "USD", VCPUSecond: 0.000014, GiBSecond: 0.0000045, EgressGB: 0.05,
				EffectiveFrom: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)})
			meter := func(id string, start time.Time, d time.Duration) {
				t.Helper()
				end := start.Add(d)
				err := st.DB().Transaction(func(tx *gorm.DB) error {
					if err := usage.Open(tx, usage.Meter{SandboxID: id, TenantID: tn.ID, Template: "busybox", VCPUs: 1, MemoryMiB: 512, StartedAt: start}); err != nil {
						return err
					}
					_, err := usage.Observe(tx, id, &usage.Sample{At: end, CPUNS: int64(d / 10)}, &end)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			meter("dec-1", time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC), 14*time.Minute+3*time.Second)
			meter("dec-2", time.Date(2026, 12, 20, 23, 30, 0, 0, time.UTC), 47*time.Minute)
			meter("now-1", now.Add(-20*time.Minute), 15*time.Minute) // the current hour, 12:00
			dec := usage.Range{From: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
			hour := usage.Range{From: now.Truncate(time.Hour), To: now.Truncate(time.Hour).Add(time.Hour)}
			decBefore, hourBefore := exportCost(t, st, tn.ID, dec), exportCost(t, st, tn.ID, hour)
			if decBefore.IsZero() || hourBefore.IsZero() {
				t.Fatalf("Got(costs before) = %v, %v; want both above 0", decBefore, hourBefore)
			}

			before := dbtest.Count(t, d.DB)
			for _, p := range []usage.Price{
				{TenantID: tn.ID, Currency: "USD", VCPUSecond: 0.00003, GiBSecond: 0.000007, EgressGB: 0.05, EffectiveFrom: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
				{Currency: "USD", VCPUSecond: 0.00003, EffectiveFrom: now.Add(-time.Second)},
			} {
				_, err := st.SetPrice(ctx, op, p)
				var fe *errdefs.FieldError
				if !errors.As(err, &fe) || fe.Field != "effective_from" || !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Got(SetPrice from %s, tenant %q) = %v; want a field error on effective_from", p.EffectiveFrom, p.TenantID, err)
				}
			}
			if ok, diff := dbtest.Equal(before, dbtest.Count(t, d.DB)); !ok {
				t.Errorf("Got(rows after a back-dated price) changed: %s; want nothing written", diff)
			}

			// From now (the zero time) and from later: the platform's and
			// the tenant's own.
			for _, p := range []usage.Price{
				{Currency: "USD", VCPUSecond: 0.00003, GiBSecond: 0.000007, EgressGB: 0.05},
				{TenantID: tn.ID, Currency: "USD", VCPUSecond: 0.00004, GiBSecond: 0.000008, EffectiveFrom: now.Add(10 * time.Minute)},
			} {
				if _, err := st.SetPrice(ctx, op, p); err != nil {
					t.Fatalf("Got(SetPrice from %s) = %v; want it saved", p.EffectiveFrom, err)
				}
			}
			if got := exportCost(t, st, tn.ID, dec); got != decBefore {
				t.Errorf("Got(December's cost after new prices) = %s; want %s, as billed", got, decBefore)
			}
			if got := exportCost(t, st, tn.ID, hour); got != hourBefore {
				t.Errorf("Got(the current hour's cost after new prices) = %s; want %s, as it was being billed", got, hourBefore)
			}
			tot, err := st.Totals(ctx, tn.ID, dec)
			if err != nil || tot.Cost != decBefore {
				t.Errorf("Got(December's totals) = %s, %v; want %s", tot.Cost, err, decBefore)
			}

			// A replica whose clock is an hour behind sees 11:30 as ahead;
			// the ledger already holds 12:00.
			slow := usage.NewStore(d.DB, func() time.Time { return now.Add(-time.Hour) })
			_, err = slow.SetPrice(ctx, op, usage.Price{TenantID: tn.ID, Currency: "USD", VCPUSecond: 1, EffectiveFrom: now.Add(-50 * time.Minute)})
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "effective_from" {
				t.Errorf("Got(SetPrice from 11:30 on a clock at 11:20, usage at 12:00) = %v; want a field error on effective_from", err)
			}
		})
	}
}

// exact is a decimal string as a rational, or the test fails.
func exact(t *testing.T, s string) *big.Rat {
	t.Helper()
	r, ok := new(big.Rat).SetString(s)
	if !ok || strings.ContainsAny(s, "eE") {
		t.Fatalf("Got(%q) = not a plain decimal; want one", s)
	}
	return r
}

// TestExportMoneyIsExact: every BilledCost of the CSV and JSON exports is
// exactly ConsumedQuantity × ListUnitPrice, written as a plain decimal
// (no float noise such as 0.011776220000000002), and their sum is exactly
// the tenant's totals and the sum of its days.
func TestExportMoneyIsExact(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		tn := e.tenant(t, "exact")
		priceFrom(t, e.db, usage.Price{Currency: "USD", VCPUSecond: 0.000014, GiBSecond: 0.0000045, CPUSecond: 0.0000021, EgressGB: 0.05,
			EffectiveFrom: t0.Add(-48 * time.Hour)})
		for i, d := range []time.Duration{841158 * time.Millisecond, 3*time.Minute + 7*time.Millisecond, 59*time.Minute + 999*time.Millisecond,
			2*time.Hour + 17*time.Second + 3*time.Millisecond} {
			id := "sb-" + string(rune('a'+i))
			start := t0.Add(-time.Duration(i+5) * time.Hour).Add(time.Duration(i) * 7 * time.Minute)
			e.open(t, tn.ID, id, 1+i%3, 256<<i, start)
			end := start.Add(d)
			e.observe(t, id, &usage.Sample{At: end, CPUNS: int64(d/3) + 123457}, &end)
			if err := e.db.Transaction(func(tx *gorm.DB) error {
				return usage.Egress(tx, tn.ID, id, 123_456_789+int64(i), 987_654_321, start.Add(time.Minute))
			}); err != nil {
				t.Fatal(err)
			}
		}
		r := usage.Range{From: t0.Add(-24 * time.Hour), To: t0.Add(24 * time.Hour)}
		tot, err := e.store.Totals(ctx, tn.ID, r)
		if err != nil {
			t.Fatal(err)
		}

		recs, col := exportCSV(t, e.store, tn.ID, r)
		if len(recs) < 10 {
			t.Fatalf("Got(export) = %d rows; want a row per meter and hour (10 or more)", len(recs))
		}
		sum := new(big.Rat)
		var rows [][3]string
		for _, rec := range recs {
			rows = append(rows, [3]string{rec[col["ConsumedQuantity"]], rec[col["ListUnitPrice"]], rec[col["BilledCost"]]})
		}

		var buf bytes.Buffer
		if _, err := e.store.Export(ctx, &buf, usage.ExportQuery{TenantID: tn.ID, Range: r, Format: usage.FormatJSON}); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(&buf)
		dec.UseNumber()
		var js []map[string]any
		if err := dec.Decode(&js); err != nil || len(js) != len(rows) {
			t.Fatalf("Got(JSON export) = %d rows, %v; want %d", len(js), err, len(rows))
		}
		for i, row := range js {
			j := [3]string{}
			for k, c := range []string{"ConsumedQuantity", "ListUnitPrice", "BilledCost"} {
				n, ok := row[c].(json.Number)
				if !ok {
					t.Fatalf("Got(JSON %s) = %T; want a number", c, row[c])
				}
				j[k] = n.String()
			}
			if j != rows[i] {
				t.Errorf("Got(JSON row %d) = %v; want the CSV's %v", i, j, rows[i])
			}
		}

		for _, row := range rows {
			want := new(big.Rat).Mul(exact(t, row[0]), exact(t, row[1]))
			if got := exact(t, row[2]); got.Cmp(want) != 0 || strings.HasSuffix(row[2], "0") && strings.Contains(row[2], ".") {
				t.Errorf("Got(BilledCost) = %s for %s × %s; want exactly %s, without trailing zeros", row[2], row[0], row[1], want.FloatString(22))
			}
			sum.Add(sum, exact(t, row[2]))
		}
		if got := exact(t, tot.Cost.String()); got.Cmp(sum) != 0 {
			t.Errorf("Got(Totals.Cost) = %s; want the export's sum %s", tot.Cost, sum.FloatString(22))
		}
		days, err := e.store.Daily(ctx, tn.ID, r)
		if err != nil {
			t.Fatal(err)
		}
		var daySum usage.Money
		for _, d := range days {
			daySum = daySum.Add(d.Cost)
		}
		if daySum != tot.Cost {
			t.Errorf("Got(sum of days) = %s; want the totals %s", daySum, tot.Cost)
		}
	})
}

// TestMoney: exact decimals in and out (JSON too), rounding half up for
// pages, and amounts that do not fit refused.
func TestMoney(t *testing.T) {
	for _, tc := range []struct{ in, out, cents, four string }{
		{"0", "0", "0.00", "0.0000"},
		{"0.011776220000000000", "0.01177622", "0.01", "0.0118"},
		{"0.015", "0.015", "0.02", "0.0150"},
		{"1.00000000000000000000001", "", "", ""},
		{"0.0000000000000000000001", "0.0000000000000000000001", "0.00", "0.0000"},
		{"1.995", "1.995", "2.00", "1.9950"},
		{"99.999999", "99.999999", "100.00", "100.0000"},
		{"12345678901234567.5", "12345678901234567.5", "12345678901234567.50", "12345678901234567.5000"}, // past 2^64 units
		{"1000000000000000000.5", "", "", ""},                                                            // past 128 bits
		{"-1", "", "", ""},
	} {
		m, err := usage.ParseMoney(tc.in)
		if tc.cents == "" {
			if err == nil {
				t.Errorf("Got(ParseMoney(%q)) = %s; want an error (more than 22 decimals)", tc.in, m)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ParseMoney(%q): %v", tc.in, err)
		}
		if m.String() != tc.out || m.Round(2) != tc.cents || m.Round(4) != tc.four {
			t.Errorf("Got(%q) = %s, %s, %s; want %s, %s, %s", tc.in, m, m.Round(2), m.Round(4), tc.out, tc.cents, tc.four)
		}
		b, _ := json.Marshal(struct{ C usage.Money }{m})
		if want := `{"C":` + tc.out + `}`; string(b) != want {
			t.Errorf("Got(json of %s) = %s; want %s", tc.in, b, want)
		}
	}
}
