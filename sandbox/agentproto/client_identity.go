package agentproto

import (
	"context"
	"fmt"
	"regexp"
)

// bootIDPattern is the kernel's boot_id: a random (version 4) UUID.
var bootIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// SetIdentity gives the VM its identity for this life (OpVMIdentity): the
// agent mixes req.Seed into the kernel's RNG and reseeds it, sets the clock
// to req.Now and keeps req.Generation. ErrNotImplemented when the agent does
// not offer it (an older image); ErrBadRequest when req is out of bounds.
// An answer that does not say the RNG was reseeded, or whose boot id is not
// a kernel boot id, is ErrProtocol.
func (c *Client) SetIdentity(ctx context.Context, req IdentityRequest) (IdentityResult, error) {
	if err := c.supports(OpVMIdentity); err != nil {
		return IdentityResult{}, fmt.Errorf("vm identity: %w", err)
	}
	resp, err := c.call(ctx, Request{V: Version, Op: OpVMIdentity, Identity: &req})
	if err != nil {
		return IdentityResult{}, fmt.Errorf("vm identity: %w", err)
	}
	res := resp.Identity
	switch {
	case res == nil:
		return IdentityResult{}, fmt.Errorf("vm identity: no identity in response: %w", ErrProtocol)
	case !res.Reseeded:
		return IdentityResult{}, fmt.Errorf("vm identity: the agent did not reseed its rng: %w", ErrProtocol)
	case !bootIDPattern.MatchString(res.BootID):
		return IdentityResult{}, fmt.Errorf("vm identity: boot id %.40q is not a kernel boot id: %w", res.BootID, ErrProtocol)
	}
	return *res, nil
}
