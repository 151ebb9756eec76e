package runs

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Day is one UTC day of a tenant's runs: how many were created, and how
// many of those have ended succeeded or failed (failed, timed out).
type Day struct {
	Day                       time.Time
	Runs, Succeeded, Failures int
}

// Count is one line of a top list: a workflow or who started its runs.
type Count struct {
	Key string
	N   int
}

// Activity is a tenant's runs over a span of days.
type Activity struct {
	Days []Day
	// Runs, Succeeded, Failures add up the days; a success rate is
	// Succeeded/(Succeeded+Failures) (cancelled and skipped runs are
	// neither).
	Runs, Succeeded, Failures int
	// Workflows and Starters are the most frequent workflows and people
	// (the member who started a run by hand, else the GitHub sender), most
	// runs first.
	Workflows, Starters []Count
}

// maxActivityDays bounds the days Activity reads.
const maxActivityDays = 92

// Activity returns the tenant's runs created from from's UTC day to to's
// (inclusive, at most maxActivityDays: the newest), every day present, with
// the top workflows and starters, at most top lines each.
func (s *Store) Activity(ctx context.Context, tenantID string, from, to time.Time, top int) (Activity, error) {
	first, last := from.UTC().Truncate(24*time.Hour), to.UTC().Truncate(24*time.Hour)
	if d := last.AddDate(0, 0, -(maxActivityDays - 1)); first.Before(d) {
		first = d
	}
	var rows []struct {
		CreatedAt time.Time `gorm:"column:created_at"`
		State     State     `gorm:"column:state"`
		Workflow  string    `gorm:"column:workflow"`
		CreatedBy string    `gorm:"column:created_by"`
		Sender    string    `gorm:"column:sender"`
	}
	if err := s.db.WithContext(ctx).Model(&Run{}).Select("created_at, state, workflow, created_by, sender").
		Where("tenant_id = ? AND created_at >= ? AND created_at < ?", tenantID, first, last.Add(24*time.Hour)).
		Scan(&rows).Error; err != nil {
		return Activity{}, fmt.Errorf("run activity of tenant %s: %w", tenantID, err)
	}
	var a Activity
	days := map[time.Time]*Day{}
	for d := first; !d.After(last); d = d.Add(24 * time.Hour) {
		a.Days = append(a.Days, Day{Day: d})
	}
	for i := range a.Days {
		days[a.Days[i].Day] = &a.Days[i]
	}
	wfs, who := map[string]int{}, map[string]int{}
	for _, r := range rows {
		d := days[r.CreatedAt.UTC().Truncate(24*time.Hour)]
		if d == nil {
			continue
		}
		d.Runs++
		switch r.State {
		case StateSucceeded:
			d.Succeeded++
		case StateFailed, StateTimedOut:
			d.Failures++
		}
		wfs[r.Workflow]++
		switch {
		case r.CreatedBy != "":
			who[r.CreatedBy]++
		case r.Sender != "":
			who[r.Sender]++
		}
	}
	for _, d := range a.Days {
		a.Runs, a.Succeeded, a.Failures = a.Runs+d.Runs, a.Succeeded+d.Succeeded, a.Failures+d.Failures
	}
	a.Workflows, a.Starters = topCounts(wfs, top), topCounts(who, top)
	return a, nil
}

// topCounts is the n largest of m, most first, ties by key.
func topCounts(m map[string]int, n int) []Count {
	out := make([]Count, 0, len(m))
	for k, v := range m {
		out = append(out, Count{Key: k, N: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Key < out[j].Key
	})
	return out[:min(len(out), max(n, 0))]
}
