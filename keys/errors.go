package keys

import (
	"errors"
	"fmt"

	"github.com/ukeys/ukeys/keyctl"
)

// Errno is an error number with the Linux kernel's value and the C
// library's text ([keyctl.Errno]).
type Errno = keyctl.Errno

// The errno values that the key retention service returns.
const (
	EPERM           = keyctl.EPERM
	ENOENT          = keyctl.ENOENT
	EINTR           = keyctl.EINTR
	EIO             = keyctl.EIO
	ENOMEM          = keyctl.ENOMEM
	EACCES          = keyctl.EACCES
	EFAULT          = keyctl.EFAULT
	EBUSY           = keyctl.EBUSY
	EEXIST          = keyctl.EEXIST
	ENODEV          = keyctl.ENODEV
	ENOTDIR         = keyctl.ENOTDIR
	EINVAL          = keyctl.EINVAL
	ENFILE          = keyctl.ENFILE
	EMFILE          = keyctl.EMFILE
	EDEADLK         = keyctl.EDEADLK
	ELOOP           = keyctl.ELOOP
	EBADSLT         = keyctl.EBADSLT
	ENOPKG          = keyctl.ENOPKG
	EBADMSG         = keyctl.EBADMSG
	EPROTONOSUPPORT = keyctl.EPROTONOSUPPORT
	EOVERFLOW       = keyctl.EOVERFLOW
	EMSGSIZE        = keyctl.EMSGSIZE
	EOPNOTSUPP      = keyctl.EOPNOTSUPP
	EDQUOT          = keyctl.EDQUOT
	ENOKEY          = keyctl.ENOKEY
	EKEYEXPIRED     = keyctl.EKEYEXPIRED
	EKEYREVOKED     = keyctl.EKEYREVOKED
	EKEYREJECTED    = keyctl.EKEYREJECTED
	EAGAIN          = keyctl.EAGAIN
	ENOSYS          = keyctl.ENOSYS
)

// opError wraps an errno with the operation and, where useful, the key
// serial. It never carries payload bytes.
type opError struct {
	op  string
	id  Serial
	err Errno
}

func (e *opError) Error() string {
	if e.id != 0 {
		return fmt.Sprintf("keys: %s %d: %v", e.op, e.id, e.err)
	}
	return fmt.Sprintf("keys: %s: %v", e.op, e.err)
}

func (e *opError) Unwrap() error { return e.err }

// ErrnoOf extracts the errno from an error returned by this package, or
// returns [EIO] for anything else (nil for nil).
func ErrnoOf(err error) (Errno, bool) {
	if err == nil {
		return 0, false
	}
	var e Errno
	if errors.As(err, &e) {
		return e, true
	}
	return EIO, true
}

// wrap attaches the operation (and key) to an errno so that errors say
// where they came from while errors.Is still matches the errno.
func wrap(op string, id Serial, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(Errno); ok {
		return &opError{op: op, id: id, err: e}
	}
	return err
}
