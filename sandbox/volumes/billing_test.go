package volumes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stockade-dev/stockade/sandbox/volumes"
	"github.com/stockade-dev/stockade/tenants"
	"github.com/stockade-dev/stockade/tenants/dbtest"
	"github.com/stockade-dev/stockade/tenants/usage"
)

// TestVolumeBilling: create, resize and delete record size periods in their
// own transactions, and the store bills them per GiB-month exactly on
// SQLite and PostgreSQL with a fake clock: each size for its own time, cut
// at the period's bounds, at now for a volume still held, and at a price
// change; the export has the rows; another tenant's volume is not in them.
func TestVolumeBilling(t *testing.T) {
	day := func(d, h int) time.Time { return time.Date(2026, time.November, d, h, 0, 0, 0, time.UTC) }
	nov := usage.Range{From: day(1, 0), To: day(31, 0)} // day 31 of November is December 1
	dec := usage.Range{From: day(31, 0), To: time.Date(2027, time.January, 1, 0, 0, 0, 0, time.UTC)}
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			clk := clockwork.NewFakeClockAt(day(1, 0))
			svc, err := volumes.New(d.DB, volumes.Config{DataDir: t.TempDir(), InstallationID: "inst-test", Clock: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			us := usage.NewStore(d.DB, clk.Now)
			a, b := newTenant(t, d.DB, "vol-bill-a-"+d.Name), newTenant(t, d.DB, "vol-bill-b-"+d.Name)
			for _, tn := range []tenants.Tenant{a, b} {
				q := tenants.DefaultQuota()
				q.MaxVolumeGiB = 10
				if _, err := tenants.NewStore(d.DB, clk.Now).SetQuota(ctx, actor, tn.ID, q); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := us.SetPrice(ctx, actor, usage.Price{Currency: "USD", VolumeGiBMonth: 0.1}); err != nil {
				t.Fatal(err)
			}
			clk.Advance(day(10, 0).Sub(clk.Now()))
			if _, err := svc.Create(ctx, actor, a.ID, "cache", 3); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Create(ctx, actor, b.ID, "other", 7); err != nil {
				t.Fatal(err)
			}
			clk.Advance(day(20, 12).Sub(clk.Now()))
			if _, err := svc.Resize(ctx, actor, a.ID, "cache", 6); err != nil {
				t.Fatal(err)
			}
			// A refused resize records nothing.
			if _, err := svc.Resize(ctx, actor, a.ID, "cache", 11); err == nil {
				t.Fatal("Got(resize over the quota) = nil; want a quota error")
			}
			if n := count(t, d.DB, "volume_usage", a.ID); n != 2 {
				t.Errorf("Got(volume_usage rows of a after create, resize, refused resize) = %d; want 2", n)
			}
			clk.Advance(day(25, 0).Sub(clk.Now()))

			gibMonths := func(r usage.Range, tenantID string) (string, usage.Money) {
				t.Helper()
				vc, err := us.VolumeCharges(ctx, tenantID, r)
				if err != nil {
					t.Fatal(err)
				}
				var qty []string
				var cost usage.Money
				for _, c := range vc {
					if c.TenantID != tenantID {
						t.Errorf("Got(charge of tenant %s in tenant %s's) = %+v; want none", c.TenantID, tenantID, c)
					}
					qty = append(qty, c.GiBMonths())
					cost = cost.Add(c.Cost)
				}
				total, err := usage.ParseMoney("0")
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range qty {
					m, err := usage.ParseMoney(q)
					if err != nil {
						t.Fatal(err)
					}
					total = total.Add(m)
				}
				return total.String(), cost
			}
			for _, tc := range []struct {
				name     string
				r        usage.Range
				wantQty  string
				wantCost string
			}{
				// Still held: billed up to now (Nov 25): 3 GiB × 10.5 days + 6 GiB × 4.5 days, of 30.
				{"held, up to now", nov, "1.95", "0.195"},
				// Inside one size: 3 GiB × 1.25 days of 30.
				{"part of a day", usage.Range{From: day(15, 0), To: day(16, 6)}, "0.125", "0.0125"},
				// Across the resize: 3 GiB × 12 h + 6 GiB × 12 h, of 30 days.
				{"the resize day", usage.Range{From: day(20, 0), To: day(21, 0)}, "0.15", "0.015"},
				{"before the volume", usage.Range{From: day(1, 0), To: day(10, 0)}, "0", "0"},
			} {
				qty, cost := gibMonths(tc.r, a.ID)
				if qty != tc.wantQty || cost.String() != tc.wantCost {
					t.Errorf("%s: Got(GiB-months, cost) = %s, %s; want %s, %s", tc.name, qty, cost, tc.wantQty, tc.wantCost)
				}
			}
			// A tenant price from Nov 25 on: 0.2 per GiB-month.
			if _, err := us.SetPrice(ctx, actor, usage.Price{TenantID: a.ID, Currency: "USD", VolumeGiBMonth: 0.2}); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Date(2026, time.December, 5, 0, 0, 0, 0, time.UTC).Sub(clk.Now()))
			if err := svc.Delete(ctx, actor, a.ID, "cache"); err != nil {
				t.Fatal(err)
			}
			clk.Advance(10 * 24 * time.Hour) // deleted: nothing more is billed
			// November: 3.15 GiB-months; 0.105 + 0.09 at 0.1, 6 GiB × 6 days of 30 = 1.2 at 0.2.
			if qty, cost := gibMonths(nov, a.ID); qty != "3.15" || cost.String() != "0.435" {
				t.Errorf("November: Got(GiB-months, cost) = %s, %s; want 3.15, 0.435", qty, cost)
			}
			// December (31 days) up to the delete: 6 GiB × 4 days, each day 6/31 cut at 13 decimals.
			if qty, cost := gibMonths(dec, a.ID); qty != "0.7741935483868" || cost.String() != "0.15483870967736" {
				t.Errorf("December: Got(GiB-months, cost) = %s, %s; want 0.7741935483868, 0.15483870967736", qty, cost)
			}
			tot, err := us.Totals(ctx, a.ID, nov)
			if err != nil || tot.Cost.String() != "0.435" {
				t.Errorf("Got(Totals(November).Cost) = %s, %v; want 0.435 (the volume storage)", tot.Cost, err)
			}
			days, err := us.Daily(ctx, a.ID, nov)
			if err != nil {
				t.Fatal(err)
			}
			var daily usage.Money
			for _, dd := range days {
				daily = daily.Add(dd.Cost)
			}
			if daily.String() != "0.435" {
				t.Errorf("Got(sum of Daily(November)) = %s; want 0.435", daily)
			}

			var buf bytes.Buffer
			if _, err := us.Export(ctx, &buf, usage.ExportQuery{TenantID: a.ID, Range: nov, Format: usage.FormatJSON}); err != nil {
				t.Fatal(err)
			}
			var rows []map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rows); err != nil {
				t.Fatalf("Got(export JSON) = %v:\n%s", err, buf.String())
			}
			var sum usage.Money
			var found bool
			for _, r := range rows {
				if r["SkuId"] != usage.SkuVolume || r["ResourceType"] != "Volume" || r["ServiceName"] != "Stockade Volumes" ||
					r["ConsumedUnit"] != "GiB-Months" || r["SubAccountId"] != a.ID {
					t.Errorf("Got(export row) = %v; want only tenant a's volume-storage rows", r)
					continue
				}
				c, _ := json.Marshal(r["BilledCost"])
				m, err := usage.ParseMoney(string(c))
				if err != nil {
					t.Fatal(err)
				}
				sum = sum.Add(m)
				if r["ChargePeriodStart"] == "2026-11-20T12:00:00Z" && r["ChargePeriodEnd"] == "2026-11-21T00:00:00Z" {
					found = true
					if r["ConsumedQuantity"] != 0.1 || r["ListUnitPrice"] != 0.1 || r["BilledCost"] != 0.01 ||
						r["BillingPeriodStart"] != "2026-11-01T00:00:00Z" || r["BillingCurrency"] != "USD" {
						t.Errorf("Got(export row of 6 GiB on Nov 20 from 12:00) = %v; want 0.1 GiB-months at 0.1 = 0.01 USD", r)
					}
				}
			}
			if !found || sum.String() != "0.435" || len(rows) != 31-10+1 {
				t.Errorf("Got(export rows, sum of BilledCost, found the resize row) = %d, %s, %v; want 22, 0.435, true:\n%s",
					len(rows), sum, found, buf.String())
			}
		})
	}
}
