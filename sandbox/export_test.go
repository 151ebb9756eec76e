package sandbox

import "context"

// SyncPass runs one pass of the sync loop and waits for its VMs.
func (s *Service) SyncPass(ctx context.Context) error {
	wait, err := s.sync(ctx, false)
	wait()
	return err
}

// SamplePass runs one pass of the usage sampler.
func (s *Service) SamplePass(ctx context.Context) error { return s.sampleAll(ctx) }

// MaxOrphansPerPass is maxOrphansPerPass, for the tests of the cap.
const MaxOrphansPerPass = maxOrphansPerPass

// GuestLogBurst is guestLogBurst, for the tests of the cap.
const GuestLogBurst = guestLogBurst

// PerVM is perVM: how many sandboxes the host places on a VM of memMiB.
func PerVM(memMiB, max int) int { return perVM(memMiB, max) }
