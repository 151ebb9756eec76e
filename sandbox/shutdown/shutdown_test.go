package shutdown_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/shutdown"
)

func TestSignal(t *testing.T) {
	s := shutdown.New()
	if err := s.Err(); err != nil {
		t.Fatalf("Got(Err before Close) = %v; want nil", err)
	}
	parent, cancelParent := context.WithCancel(context.Background())
	byParent, cancel1 := s.Bound(parent)
	defer cancel1()
	byClose, cancel2 := s.Bound(context.Background())
	defer cancel2()

	cancelParent()
	<-byParent.Done()
	if err := byClose.Err(); err != nil {
		t.Fatalf("Got(Err of a bound context when another's parent ended) = %v; want nil", err)
	}

	s.Close()
	s.Close() // idempotent
	<-byClose.Done()
	<-s.Done()
	if err := s.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Got(Err after Close) = %v; want context.Canceled", err)
	}
	late, cancel3 := s.Bound(context.Background())
	defer cancel3()
	if err := late.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Got(Err of a context bound after Close) = %v; want context.Canceled", err)
	}
}
