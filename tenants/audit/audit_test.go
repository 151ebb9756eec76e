package audit_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockade-dev/stockade/tenants/audit"
	"github.com/stockade-dev/stockade/tenants/dbtest"
)

var ctx = context.Background()

var user = audit.Actor{Kind: audit.ActorUser, ID: "u1", Name: "Ann", RemoteAddr: "192.0.2.1", RequestID: "r1"}

func TestCodes(t *testing.T) {
	want := map[string]string{
		"auth.login": "SA1000I", "auth.login_failed": "SA1001W", "auth.logout": "SA1002I",
		"tenant.created": "ST2000I", "member.invited": "SM3000I", "member.activated": "SM3001I",
		"member.role_changed": "SM3002I", "member.removed": "SM3003I", "token.created": "SK4000I",
		"token.revoked": "SK4001I", "audit.exported": "SX5000I",
	}
	for typ, code := range want {
		if got, ok := audit.Code(typ); !ok || got != code {
			t.Errorf("Got(Code(%s)) = %q, %v; want %s", typ, got, ok, code)
		}
	}
	seen := map[string]string{}
	format := regexp.MustCompile(`^S[A-Z][0-9]{4}[IWE]$`)
	for _, typ := range audit.Types() {
		code, _ := audit.Code(typ)
		if prev, dup := seen[code]; dup {
			t.Errorf("code %s used by %s and %s", code, prev, typ)
		}
		seen[code] = typ
		if !format.MatchString(code) {
			t.Errorf("Got(Code(%s)) = %s; want S<area><4 digits><I|W|E>", typ, code)
		}
	}
}

func each(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	for _, d := range dbtest.Databases(t) {
		t.Run(d.Name, func(t *testing.T) { fn(t, d.DB) })
	}
}

func TestWriteAndRecord(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		now := time.Date(2031, 5, 6, 7, 8, 9, 987654321, time.FixedZone("X", 3600))
		log := audit.NewLog(db, func() time.Time { return now })
		e := user.Event("t1", audit.TypeMemberInvited, "membership", "m1", map[string]any{"email": "a@b.c", "n": 2})
		if err := log.Record(ctx, e); err != nil {
			t.Fatalf("Record = %v", err)
		}
		err := db.Transaction(func(tx *gorm.DB) error {
			return audit.Write(tx, audit.Event{TenantID: "t1", Type: audit.TypeLoginFailed, ActorKind: audit.ActorAnonymous, Outcome: audit.OutcomeFailure})
		})
		if err != nil {
			t.Fatalf("Write = %v", err)
		}
		evs, err := log.List(ctx, "t1", audit.Filter{})
		if err != nil || len(evs) != 2 {
			t.Fatalf("Got(List) = %d events, %v; want 2", len(evs), err)
		}
		got := evs[1] // newest first
		want := audit.Event{ID: got.ID, TenantID: "t1", Time: now.UTC().Truncate(time.Microsecond), Code: "SM3000I",
			Type: "member.invited", ActorKind: "user", ActorID: "u1", ActorName: "Ann", TargetKind: "membership",
			TargetID: "m1", Outcome: "success", RemoteAddr: "192.0.2.1", RequestID: "r1"}
		gotNoDetails := got
		gotNoDetails.Details = nil
		if fmt.Sprint(gotNoDetails) != fmt.Sprint(want) || got.Time.Location() != time.UTC {
			t.Errorf("Got(event) = %+v; want %+v", gotNoDetails, want)
		}
		if got.Details["email"] != "a@b.c" || got.Details["n"] != float64(2) {
			t.Errorf("Got(Details) = %v; want email, n", got.Details)
		}
		if evs[0].Code != "SA1001W" || evs[0].Outcome != "failure" || evs[0].Details == nil {
			t.Errorf("Got(written event) = %+v", evs[0])
		}
	})
}

func TestWriteRejects(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		log := audit.NewLog(db, nil)
		cases := []struct {
			name string
			e    audit.Event
		}{
			{"unknown type", audit.Event{Type: "nope.nothing", ActorKind: audit.ActorSystem}},
			{"no type", audit.Event{ActorKind: audit.ActorSystem}},
			{"wrong code", audit.Event{Type: audit.TypeLogin, Code: "SA9999I", ActorKind: audit.ActorUser}},
			{"actor kind", audit.Event{Type: audit.TypeLogin, ActorKind: "robot"}},
			{"outcome", audit.Event{Type: audit.TypeLogin, ActorKind: audit.ActorUser, Outcome: "meh"}},
			{"secret detail", audit.Event{Type: audit.TypeTokenCreated, ActorKind: audit.ActorUser, Details: map[string]any{"secret": "stk_x"}}},
			{"password detail", audit.Event{Type: audit.TypeLogin, ActorKind: audit.ActorUser, Details: map[string]any{"DB_Password": "x"}}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if err := log.Record(ctx, c.e); err == nil {
					t.Errorf("Got(Record(%s)) = nil; want error", c.name)
				}
				if err := audit.Write(db, c.e); err == nil {
					t.Errorf("Got(Write(%s)) = nil; want error", c.name)
				}
			})
		}
		var n int64
		db.Model(&audit.Event{}).Count(&n)
		if n != 0 {
			t.Errorf("Got(rows after rejected writes) = %d; want 0", n)
		}
		// Names of secrets are fine.
		ok := user.Event("t", audit.TypeTokenCreated, "token", "k", map[string]any{"secret_name": "GITHUB_TOKEN", "name": "ci"})
		if err := log.Record(ctx, ok); err != nil {
			t.Errorf("Got(Record with secret_name) = %v; want nil", err)
		}
	})
}

// seed writes n events for tenant t at one-minute steps from start, cycling
// types, actors and outcomes, and returns them oldest first.
func seed(t *testing.T, db *gorm.DB, tenant string, n int, start time.Time) []audit.Event {
	t.Helper()
	types := []string{audit.TypeLogin, audit.TypeMemberInvited, audit.TypeMemberRemoved, audit.TypeTokenCreated}
	out := make([]audit.Event, 0, n)
	for i := range n {
		clk := start.Add(time.Duration(i) * time.Minute)
		log := audit.NewLog(db, func() time.Time { return clk })
		e := audit.Actor{Kind: audit.ActorUser, ID: fmt.Sprintf("u%d", i%3), Name: fmt.Sprintf("User %d", i%3)}.
			Event(tenant, types[i%len(types)], "thing", fmt.Sprintf("target-%03d", i), map[string]any{"seq": i, "note": fmt.Sprintf("note %d_x%%", i)})
		if i%5 == 0 {
			e.Outcome = audit.OutcomeFailure
		}
		if err := log.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestListFilters(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		start := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		seed(t, db, "acme", 40, start)
		seed(t, db, "other", 5, start)
		log := audit.NewLog(db, nil)

		targets := func(evs []audit.Event) []string {
			var out []string
			for _, e := range evs {
				out = append(out, e.TargetID)
			}
			return out
		}
		cases := []struct {
			name   string
			f      audit.Filter
			count  int
			first  string // newest match
			verify func(audit.Event) bool
		}{
			{"all", audit.Filter{}, 40, "target-039", func(e audit.Event) bool { return e.TenantID == "acme" }},
			{"limit", audit.Filter{Limit: 7}, 7, "target-039", nil},
			{"type", audit.Filter{Type: audit.TypeMemberInvited}, 10, "target-037", func(e audit.Event) bool { return e.Type == "member.invited" }},
			{"type prefix", audit.Filter{Type: "member."}, 20, "target-038", func(e audit.Event) bool { return strings.HasPrefix(e.Type, "member.") }},
			{"actor", audit.Filter{ActorID: "u1"}, 13, "target-037", func(e audit.Event) bool { return e.ActorID == "u1" }},
			{"outcome", audit.Filter{Outcome: audit.OutcomeFailure}, 8, "target-035", func(e audit.Event) bool { return e.Outcome == "failure" }},
			{"since until", audit.Filter{Since: start.Add(10 * time.Minute), Until: start.Add(20 * time.Minute)}, 10, "target-019", nil},
			{"query target", audit.Filter{Query: "TARGET-02"}, 10, "target-029", nil},
			{"query actor name", audit.Filter{Query: "user 2"}, 13, "target-038", func(e audit.Event) bool { return e.ActorName == "User 2" }},
			{"query details with like chars", audit.Filter{Query: "note 3_x%"}, 1, "target-003", nil},
			{"query underscore is literal", audit.Filter{Query: "note 3ax"}, 0, "", nil},
			{"combined", audit.Filter{Type: audit.TypeLogin, Outcome: audit.OutcomeFailure}, 2, "target-020", nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				evs, err := log.List(ctx, "acme", c.f)
				if err != nil {
					t.Fatalf("List = %v", err)
				}
				if len(evs) != c.count {
					t.Fatalf("Got(len(List(%+v))) = %d %v; want %d", c.f, len(evs), targets(evs), c.count)
				}
				if c.count > 0 && evs[0].TargetID != c.first {
					t.Errorf("Got(newest) = %s; want %s", evs[0].TargetID, c.first)
				}
				for i, e := range evs {
					if c.verify != nil && !c.verify(e) {
						t.Errorf("event %+v does not match the filter", e)
					}
					if i > 0 && evs[i-1].ID <= e.ID {
						t.Errorf("events not newest first at %d", i)
					}
				}
			})
		}

		// Cursor paging walks all 40 without gaps or repeats.
		var seen []string
		f := audit.Filter{Limit: 15}
		for {
			page, err := log.List(ctx, "acme", f)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, targets(page)...)
			if len(page) < f.Limit {
				break
			}
			f.Before = page[len(page)-1].ID
		}
		if len(seen) != 40 || seen[0] != "target-039" || seen[39] != "target-000" {
			t.Errorf("Got(paged targets) = %d, %v; want 40 newest to oldest", len(seen), seen)
		}
		if _, err := log.List(ctx, "acme", audit.Filter{Before: "x' OR 1=1"}); !errors.Is(err, audit.ErrBadFilter) {
			t.Errorf("Got(List with a bad cursor) = %v; want ErrBadFilter", err)
		}
		if evs, _ := log.List(ctx, "acme", audit.Filter{Limit: 5000}); len(evs) != 40 {
			t.Errorf("Got(len(List with Limit 5000)) = %d; want 40", len(evs))
		}
		if evs, _ := log.List(ctx, "", audit.Filter{}); len(evs) != 0 {
			t.Errorf("Got(platform events) = %d; want 0", len(evs))
		}
	})
}

func TestListLimitCap(t *testing.T) {
	db := dbtest.SQLite(t)
	seed(t, db, "big", audit.MaxLimit+5, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	log := audit.NewLog(db, nil)
	for _, c := range []struct{ limit, want int }{{0, audit.DefaultLimit}, {-1, audit.DefaultLimit}, {audit.MaxLimit + 1, audit.MaxLimit}} {
		evs, err := log.List(ctx, "big", audit.Filter{Limit: c.limit})
		if err != nil || len(evs) != c.want {
			t.Errorf("Got(len(List(Limit %d))) = %d, %v; want %d", c.limit, len(evs), err, c.want)
		}
	}
}

func TestStreamPages(t *testing.T) {
	each(t, func(t *testing.T, db *gorm.DB) {
		start := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
		want := seed(t, db, "acme", 23, start)
		seed(t, db, "other", 4, start)
		log := audit.NewLog(db, nil)
		audit.SetPageSize(log, 5)

		var got []string
		if err := log.Stream(ctx, "acme", audit.Filter{Limit: 2}, func(e audit.Event) error {
			got = append(got, e.TargetID)
			return nil
		}); err != nil {
			t.Fatalf("Stream = %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("Got(len(Stream)) = %d; want %d (Limit ignored, 5 pages)", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i].TargetID {
				t.Fatalf("Got(Stream[%d]) = %s; want %s (oldest first)", i, got[i], want[i].TargetID)
			}
		}

		// An exact multiple of the page size ends cleanly.
		got = nil
		if err := log.Stream(ctx, "acme", audit.Filter{Until: start.Add(20 * time.Minute)}, func(e audit.Event) error {
			got = append(got, e.TargetID)
			return nil
		}); err != nil || len(got) != 20 {
			t.Errorf("Got(Stream until 20m) = %d, %v; want 20", len(got), err)
		}

		stop := errors.New("stop")
		calls := 0
		err := log.Stream(ctx, "acme", audit.Filter{}, func(audit.Event) error {
			calls++
			if calls == 7 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 7 {
			t.Errorf("Got(Stream stopped by fn) = %v after %d calls; want stop after 7", err, calls)
		}
	})
}
