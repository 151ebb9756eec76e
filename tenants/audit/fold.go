package audit

import (
	"context"
	"fmt"
)

// Folded is a run of repeated events shown as one: the newest of them
// with how many there were and when the oldest happened. Six identical
// egress denials of one sandbox are one Folded with Count 6.
type Folded struct {
	Event // the newest
	Count int
	// First is the oldest event's time (Event.Time when Count is 1).
	First Event
}

// foldKey is what makes two events the same for people reading a feed:
// who did what to which object with which outcome, and the host of an
// egress refusal. Ids, ports, counters and request ids of each event
// differ and do not count.
func foldKey(e Event) string {
	host, _ := e.Details["host"].(string)
	name, _ := e.Details["secret_name"].(string)
	return e.Type + "\x00" + e.ActorKind + "\x00" + e.ActorID + "\x00" + e.ActorName + "\x00" + e.TargetKind + "\x00" +
		e.TargetID + "\x00" + e.Outcome + "\x00" + host + "\x00" + name
}

// Fold folds repeated events of evs (newest first, as List returns them)
// into one row each, at the place of the newest, keeping the order.
func Fold(evs []Event) []Folded {
	var out []Folded
	at := map[string]int{}
	for _, e := range evs {
		k := foldKey(e)
		if i, ok := at[k]; ok {
			out[i].Count++
			out[i].First = e
			continue
		}
		at[k] = len(out)
		out = append(out, Folded{Event: e, Count: 1, First: e})
	}
	return out
}

// recentWindow is how many of the newest events Recent reads per row it
// answers: enough for a burst of repeats to fold into one row.
const recentWindow = 20

// Recent returns the tenant's newest events folded (Fold), at most rows
// rows, read from the newest rows*recentWindow events (at most MaxLimit).
func (l *Log) Recent(ctx context.Context, tenantID string, rows int) ([]Folded, error) {
	if rows <= 0 {
		return nil, nil
	}
	evs, err := l.List(ctx, tenantID, Filter{Limit: min(rows*recentWindow, MaxLimit)})
	if err != nil {
		return nil, fmt.Errorf("recent audit events of tenant %s: %w", tenantID, err)
	}
	out := Fold(evs)
	return out[:min(len(out), rows)], nil
}
