package vmpool

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/stockade-dev/stockade/sandbox/agentproto"
)

// identitySeedBytes is how much host randomness each life of a VM gets:
// 512 bits, twice what the guest kernel needs to call its CRNG ready.
const identitySeedBytes = 64

// identityTimeout bounds the vm.identity call (two ioctls, a clock_settime
// and a small read in the guest).
const identityTimeout = 30 * time.Second

// setIdentity gives a VM whose agent just said hello its own identity for
// this life, before any tenant work: a fresh seed for its kernel's RNG, the
// service clock's time and its VM id as the generation. Two VMs restored
// from one memory snapshot share RNG state and a stale clock until this
// runs; a freshly booted one gets the same, so every path is one. An agent
// that does not offer vm.identity (an older image) fails it.
func (s *Service) setIdentity(ctx context.Context, c *agentproto.Client, vm VM) error {
	start := time.Now()
	res, err := identify(ctx, c, vm.ID, s.cfg.Clock.Now())
	if err != nil {
		return err
	}
	s.log.Debug("vm identity set", "vm", vm.ID, "clock_step", res.ClockStepped.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// identify draws the seed and makes the call; its error starts with
// "vm identity" (the reason a boot fails with).
func identify(ctx context.Context, c *agentproto.Client, generation string, now time.Time) (agentproto.IdentityResult, error) {
	ctx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	seed := make([]byte, identitySeedBytes)
	rand.Read(seed) // never fails (crypto/rand)
	defer clear(seed)
	return c.SetIdentity(ctx, agentproto.IdentityRequest{Seed: seed, Now: now, Generation: generation})
}
