package audit_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
)

// TestRecentFolds: six egress denials of one sandbox for one host, with
// their own ports and event ids, are one row with a count at the place of
// the newest; a denial for another host and other events stay rows of
// their own; another tenant's events are not read. Count counts what a
// filter matches.
func TestRecentFolds(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)
		log := audit.NewLog(db, func() time.Time { return now })
		gw := audit.Actor{Kind: audit.ActorSystem, ID: "egress-gateway", Name: "egress gateway"}
		record := func(tenant string, e audit.Event) {
			t.Helper()
			e.TenantID = tenant
			if err := log.Record(ctx, e); err != nil {
				t.Fatalf("Record = %v", err)
			}
			now = now.Add(time.Second)
		}
		denial := func(host string, port int) audit.Event {
			e := gw.Event("", audit.TypeEgressDenied, "sandbox", "sb-1", map[string]any{"host": host, "port": port, "egress_event": now.String()})
			e.Outcome = audit.OutcomeDenied
			return e
		}
		record("t1", user.Event("", audit.TypeMemberInvited, "membership", "m1", map[string]any{"email": "a@b.c"}))
		for i := range 3 {
			record("t1", denial("evil.example.com", 443+i))
		}
		record("t1", denial("other.example.com", 443))
		for i := range 3 {
			record("t1", denial("evil.example.com", 80+i))
		}
		record("t2", denial("evil.example.com", 443))

		got, err := log.Recent(ctx, "t1", 10)
		if err != nil {
			t.Fatalf("Recent = %v", err)
		}
		type row struct {
			typ, host string
			count     int
		}
		want := []row{{audit.TypeEgressDenied, "evil.example.com", 6}, {audit.TypeEgressDenied, "other.example.com", 1}, {audit.TypeMemberInvited, "", 1}}
		if len(got) != len(want) {
			t.Fatalf("Got(Recent rows) = %d (%+v); want %d", len(got), got, len(want))
		}
		for i, w := range want {
			host, _ := got[i].Details["host"].(string)
			if got[i].Type != w.typ || host != w.host || got[i].Count != w.count {
				t.Errorf("Got(row %d) = %s %s x%d; want %s %s x%d", i, got[i].Type, host, got[i].Count, w.typ, w.host, w.count)
			}
		}
		// The row is the newest of its run, First the oldest.
		if first, last := got[0].First.Time, got[0].Time; !first.Before(last) || last.Sub(first) != 6*time.Second {
			t.Errorf("Got(folded span) = %s .. %s; want the first denial 6 s before the last", first, last)
		}
		if got, err := log.Recent(ctx, "t1", 1); err != nil || len(got) != 1 || got[0].Count != 6 {
			t.Errorf("Got(Recent 1 row) = %+v, %v; want the folded denials", got, err)
		}
		for _, c := range []struct {
			f    audit.Filter
			want int64
		}{{audit.Filter{Outcome: audit.OutcomeDenied}, 7}, {audit.Filter{Type: audit.TypeMemberInvited}, 1}, {audit.Filter{Outcome: audit.OutcomeDenied, Since: now.Add(-3 * time.Second)}, 2}} {
			if n, err := log.Count(ctx, "t1", c.f); err != nil || n != c.want {
				t.Errorf("Got(Count(%+v)) = %d, %v; want %d", c.f, n, err, c.want)
			}
		}
		if got, err := log.Recent(ctx, "t3", 10); err != nil || len(got) != 0 {
			t.Errorf("Got(Recent of a tenant without events) = %+v, %v; want none", got, err)
		}
	})
}
