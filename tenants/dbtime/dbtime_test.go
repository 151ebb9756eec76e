package dbtime

import (
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	at := time.Date(2031, 1, 2, 3, 4, 5, 123456789, time.FixedZone("CET", 3600))
	want := time.Date(2031, 1, 2, 2, 4, 5, 123456000, time.UTC)
	if got := Clock(func() time.Time { return at }).Now(); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("Got(Clock.Now()) = %v; want %v (UTC, microseconds)", got, want)
	}
	var zero Clock
	before := time.Now().Add(-time.Second)
	if got := zero.Now(); got.Before(before) || got.Location() != time.UTC || got.Nanosecond()%1000 != 0 {
		t.Errorf("Got(nil Clock.Now()) = %v; want the real time in UTC at microseconds", got)
	}
}
