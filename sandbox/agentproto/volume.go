package agentproto

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// ValidVolumeID is the shape of a volume id: the disk's serial as the host
// sets it (virtio-blk keeps 20 bytes of a serial).
var ValidVolumeID = regexp.MustCompile(`^vol-[0-9a-f]{16}$`)

// VolumeRequest names a volume disk for OpVolumeMount and OpVolumeUnmount.
type VolumeRequest struct {
	// ID is the volume's id, which is also its disk's serial: the agent
	// finds the disk by it, never by its slot.
	ID string `json:"id"`
	// ReadOnly mounts it ro,noload (the disk is attached read-only).
	ReadOnly bool `json:"read_only,omitempty"`
}

// VolumeBind is one volume bound into a sandbox.
type VolumeBind struct {
	ID       string `json:"id"`
	Path     string `json:"path"` // absolute, clean, inside the sandbox
	ReadOnly bool   `json:"read_only,omitempty"`
}

// MaxVolumeBinds bounds the volumes of one sandbox.
const MaxVolumeBinds = 8

// volumeForbidden are the sandbox paths a volume may not cover or sit in:
// the kernel's file systems and the template's system folders.
var volumeForbidden = []string{"/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
	"/libx32", "/boot", "/run", "/var/lib/dpkg", "/.stockade"}

// CheckVolumePath reports why p cannot take a volume in a sandbox: it must
// be absolute and clean, not / and not in (or above) a system folder;
// /workspace and its subfolders, /home, /opt, /mnt, /srv, /data are fine.
func CheckVolumePath(p string) error {
	switch {
	case p == "" || len(p) > 1024 || strings.ContainsAny(p, "\x00\n:,"):
		return fmt.Errorf("path %q: at most 1024 bytes, no NUL, newline, ':' or ','", p)
	case !path.IsAbs(p) || path.Clean(p) != p:
		return fmt.Errorf("path %q: must be absolute and clean (no '..', '.', '//' or trailing '/')", p)
	case p == "/":
		return fmt.Errorf("path %q: cannot cover the whole sandbox", p)
	}
	for _, f := range volumeForbidden {
		if p == f || strings.HasPrefix(p, f+"/") || strings.HasPrefix(f, p+"/") {
			return fmt.Errorf("path %q: %s is the system's", p, f)
		}
	}
	return nil
}

// CheckVolumeBinds checks the binds of a sandbox spec: bounded, valid ids,
// valid paths, none repeated or inside another.
func CheckVolumeBinds(binds []VolumeBind) error {
	if len(binds) > MaxVolumeBinds {
		return fmt.Errorf("%d volumes: at most %d", len(binds), MaxVolumeBinds)
	}
	for i, b := range binds {
		if !ValidVolumeID.MatchString(b.ID) {
			return fmt.Errorf("volume id %q", b.ID)
		}
		if err := CheckVolumePath(b.Path); err != nil {
			return err
		}
		for _, o := range binds[:i] {
			if o.ID == b.ID || o.Path == b.Path || strings.HasPrefix(o.Path, b.Path+"/") || strings.HasPrefix(b.Path, o.Path+"/") {
				return fmt.Errorf("volumes %s at %s and %s at %s: the same volume or nested paths", o.ID, o.Path, b.ID, b.Path)
			}
		}
	}
	return nil
}

// MountVolume mounts the volume disk with serial id in the VM.
func (c *Client) MountVolume(ctx context.Context, id string, readOnly bool) error {
	_, err := c.call(ctx, Request{V: Version, Op: OpVolumeMount, Volume: &VolumeRequest{ID: id, ReadOnly: readOnly}})
	return err
}

// UnmountVolume unmounts the volume in the VM before its disk is detached.
func (c *Client) UnmountVolume(ctx context.Context, id string) error {
	_, err := c.call(ctx, Request{V: Version, Op: OpVolumeUnmount, Volume: &VolumeRequest{ID: id}})
	return err
}
