// Package dbtime is the time as the stores write it: in UTC, at the
// microsecond precision PostgreSQL keeps, so that SQLite and PostgreSQL
// return exactly what was written.
package dbtime

import "time"

// Of is t as the database keeps it.
func Of(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Clock is a store's injected clock; the nil Clock reads time.Now.
type Clock func() time.Time

// Now is the clock's time as the database keeps it.
func (c Clock) Now() time.Time {
	if c == nil {
		return Of(time.Now())
	}
	return Of(c())
}
