package hypervisor

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"
)

// Sentinels that callers check with errors.Is. Every error a Host returns for
// one of these conditions wraps the sentinel and names the operation.
var (
	// ErrNotFound: no domain of this installation with that id. A domain of
	// another installation, or one without our metadata, is also "not found":
	// this driver never touches it.
	ErrNotFound = errors.New("domain not found")
	// ErrUnavailable: libvirt cannot be reached (not running, restarting, or
	// the connection was lost and is being re-established).
	ErrUnavailable = errors.New("libvirt unavailable")
	// ErrConflict: the operation does not fit the domain's state (it already
	// exists, is not running, its channel is held by another client).
	ErrConflict = errors.New("domain state conflict")
	// ErrInvalid: the request itself is wrong (bad id, missing kernel, ...).
	ErrInvalid = errors.New("invalid domain request")
	// ErrStreamClosed: one channel or console stream failed or ended (its
	// VM died, libvirt aborted that stream, or the connection under it
	// dropped). It is about that stream only, never proof that the host
	// connection is gone: only a failed liveness probe of the connection
	// itself says that (KindDisconnected).
	ErrStreamClosed = errors.New("libvirt stream closed")
)

// classify maps a libvirt error to one of our sentinels while keeping the
// original error in the chain. It never looks at message text.
func classify(err error) error {
	var lerr libvirt.Error
	if !errors.As(err, &lerr) {
		return err
	}
	switch lerr.Code {
	case libvirt.ERR_NO_DOMAIN:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case libvirt.ERR_OPERATION_INVALID:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case libvirt.ERR_NO_CONNECT, libvirt.ERR_INVALID_CONN, libvirt.ERR_RPC, libvirt.ERR_AUTH_UNAVAILABLE:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case libvirt.ERR_SYSTEM_ERROR, libvirt.ERR_INTERNAL_ERROR:
		// Socket errors surface as system/internal errors from the RPC
		// layer; the same codes from a driver mean something else.
		if lerr.Domain == libvirt.FROM_RPC || lerr.Domain == libvirt.FROM_REMOTE {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return err
}

// streamErr wraps a libvirt error from one stream's I/O. A stream's error
// is the stream's: it never carries ErrUnavailable, whatever its code (a
// dying QEMU's channel reports RPC and system errors too), so that nothing
// reads one VM's death as the host's.
func streamErr(op string, err error) error {
	return fmt.Errorf("%s: %w: %w", op, ErrStreamClosed, err)
}

// libvirtCode returns the libvirt error code in err's chain, or -1.
func libvirtCode(err error) libvirt.ErrorNumber {
	var lerr libvirt.Error
	if errors.As(err, &lerr) {
		return lerr.Code
	}
	return -1
}
