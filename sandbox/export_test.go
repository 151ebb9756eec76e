package sandbox

import "context"

// SyncPass runs one pass of the sync loop and waits for its VMs.
func (s *Service) SyncPass(ctx context.Context) error { return s.sync(ctx, false) }

// SamplePass runs one pass of the usage sampler.
func (s *Service) SamplePass(ctx context.Context) error { return s.sampleAll(ctx) }
