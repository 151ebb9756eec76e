package audit_test

import (
	"testing"
	"time"

	"github.com/stockade-dev/stockade/tenants/audit"
)

func TestLimiter(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	l := audit.NewLimiter(time.Minute, 3)
	var admitted int
	for i := 0; i < 10; i++ {
		if ok, _ := l.Admit("k", t0.Add(time.Duration(i)*time.Second)); ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("Got(admitted of 10 in a window with burst 3) = %d; want 3", admitted)
	}
	if ok, _ := l.Admit("other", t0); !ok {
		t.Errorf("Got(Admit(another key)) = false; want true: keys are apart")
	}
	ok, suppressed := l.Admit("k", t0.Add(time.Minute))
	if !ok || suppressed != 7 {
		t.Errorf("Got(first Admit of the next window) = %v, %d suppressed; want true, 7", ok, suppressed)
	}
	l.Forget("k")
	if ok, suppressed := l.Admit("k", t0.Add(61*time.Second)); !ok || suppressed != 0 {
		t.Errorf("Got(Admit after Forget) = %v, %d; want a fresh window", ok, suppressed)
	}
}
