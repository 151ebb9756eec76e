package clocktest_test

import (
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/clocktest"
)

func TestAuto(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktest.Auto(t, start, time.Second)
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 0} {
		before := clk.Now()
		<-clk.After(d)
		if got := clk.Since(before); got != d {
			t.Errorf("Got(time passed waiting %s) = %s; want %s", d, got, d)
		}
	}
	if got := clk.Since(start); got != 4*time.Second {
		t.Errorf("Got(time passed in all) = %s; want 4s", got)
	}
}
