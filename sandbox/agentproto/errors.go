package agentproto

import (
	"errors"
	"fmt"
)

var (
	// ErrTooLarge: a message or frame is over its size bound.
	ErrTooLarge = errors.New("over the size bound")
	// ErrEmptyMessage: a message of zero bytes.
	ErrEmptyMessage = errors.New("empty message")
	// ErrUnknownOp: the peer does not know the op.
	ErrUnknownOp = errors.New("unknown op")
	// ErrUnsupportedVersion: no protocol version both sides speak.
	ErrUnsupportedVersion = errors.New("unsupported protocol version")
	// ErrBadRequest: the peer could not use the request.
	ErrBadRequest = errors.New("bad request")
	// ErrNotImplemented: the op is defined but the peer does not implement it yet.
	ErrNotImplemented = errors.New("not implemented")
	// ErrRemote: the peer failed the op for a reason of its own.
	ErrRemote = errors.New("remote error")
	// ErrProtocol: the peer broke the protocol (e.g. a response without its payload).
	ErrProtocol = errors.New("protocol violation")
	// ErrNotFound: no such sandbox, template, file or executable.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the sandbox exists already, or is not running.
	ErrConflict = errors.New("conflict")
	// ErrFileTooLarge: a file over the bound of the request or the agent.
	ErrFileTooLarge = errors.New("file too large")
	// ErrExhausted: out of room (sandboxes in the guest, processes or disk
	// space in the sandbox).
	ErrExhausted = errors.New("resources exhausted")
	// ErrPermission: the sandbox user may not do this.
	ErrPermission = errors.New("permission denied")
	// ErrSessionLost: the agent session ended under a streaming op (the
	// channel was dropped, the VM or the host went away).
	ErrSessionLost = errors.New("agent session lost")
)

// RemoteError is an Error received from the peer. errors.Is matches it
// against the sentinel for its code.
type RemoteError struct {
	Op  Op
	Err Error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("agent %s: %s: %s", e.Op, e.Err.Code, e.Err.Message)
}

// Is maps the wire code onto this package's sentinels.
func (e *RemoteError) Is(target error) bool {
	switch e.Err.Code {
	case CodeUnknownOp:
		return target == ErrUnknownOp
	case CodeUnsupportedVersion:
		return target == ErrUnsupportedVersion
	case CodeBadRequest:
		return target == ErrBadRequest
	case CodeNotImplemented:
		return target == ErrNotImplemented
	case CodeNotFound:
		return target == ErrNotFound
	case CodeConflict:
		return target == ErrConflict
	case CodeTooLarge:
		return target == ErrFileTooLarge
	case CodeExhausted:
		return target == ErrExhausted
	case CodePermission:
		return target == ErrPermission
	default:
		return target == ErrRemote
	}
}

// ErrorFor builds the wire Error for err, keeping the code of a known sentinel.
func ErrorFor(err error) *Error {
	code := CodeInternal
	switch {
	case errors.Is(err, ErrUnknownOp):
		code = CodeUnknownOp
	case errors.Is(err, ErrUnsupportedVersion):
		code = CodeUnsupportedVersion
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrTooLarge), errors.Is(err, ErrEmptyMessage):
		code = CodeBadRequest
	case errors.Is(err, ErrNotImplemented):
		code = CodeNotImplemented
	case errors.Is(err, ErrNotFound):
		code = CodeNotFound
	case errors.Is(err, ErrConflict):
		code = CodeConflict
	case errors.Is(err, ErrFileTooLarge):
		code = CodeTooLarge
	case errors.Is(err, ErrExhausted):
		code = CodeExhausted
	case errors.Is(err, ErrPermission):
		code = CodePermission
	}
	e := &Error{Code: code, Message: err.Error()}
	if code == CodeUnsupportedVersion {
		e.MinVersion, e.MaxVersion = MinVersion, Version
	}
	return e
}
