package keyctl

import (
	"errors"
	"fmt"
	"syscall"
)

// Errno is an error number with the Linux kernel's value and the C
// library's text, so that errors mean the same on every host and travel
// over the wire as numbers. On Linux, [errors.Is] also matches the
// equivalent [syscall.Errno].
type Errno uint16

// The errno values that the key retention service returns.
const (
	EPERM     Errno = 1
	ENOENT    Errno = 2
	EINTR     Errno = 4
	EIO       Errno = 5
	ENOMEM    Errno = 12
	EACCES    Errno = 13
	EFAULT    Errno = 14
	EBUSY     Errno = 16
	EEXIST    Errno = 17
	ENODEV    Errno = 19
	ENOTDIR   Errno = 20
	EINVAL    Errno = 22
	ENFILE    Errno = 23
	EMFILE    Errno = 24
	EDEADLK   Errno = 35
	ELOOP     Errno = 40
	EBADSLT   Errno = 57
	ENOPKG    Errno = 65
	EBADMSG   Errno = 74
	EOVERFLOW Errno = 75
	EMSGSIZE  Errno = 90
	// EPROTONOSUPPORT: a daemon that cannot read the state of the one it
	// would take over from (a later version's).
	EPROTONOSUPPORT Errno = 93
	EOPNOTSUPP      Errno = 95
	EDQUOT          Errno = 122
	ENOKEY          Errno = 126
	EKEYEXPIRED     Errno = 127
	EKEYREVOKED     Errno = 128
	EKEYREJECTED    Errno = 129
	EAGAIN          Errno = 11
	ENOSYS          Errno = 38
)

var errnoText = map[Errno]string{
	EPERM:           "Operation not permitted",
	ENOENT:          "No such file or directory",
	EINTR:           "Interrupted system call",
	EIO:             "Input/output error",
	EAGAIN:          "Resource temporarily unavailable",
	ENOSYS:          "Function not implemented",
	ENOMEM:          "Cannot allocate memory",
	EACCES:          "Permission denied",
	EFAULT:          "Bad address",
	EBUSY:           "Device or resource busy",
	EEXIST:          "File exists",
	ENODEV:          "No such device",
	ENOTDIR:         "Not a directory",
	EINVAL:          "Invalid argument",
	ENFILE:          "Too many open files in system",
	EMFILE:          "Too many open files",
	EDEADLK:         "Resource deadlock avoided",
	ELOOP:           "Too many levels of symbolic links",
	EBADSLT:         "Invalid slot",
	ENOPKG:          "Package not installed",
	EBADMSG:         "Bad message",
	EPROTONOSUPPORT: "Protocol not supported",
	EOVERFLOW:       "Value too large for defined data type",
	EMSGSIZE:        "Message too long",
	EOPNOTSUPP:      "Operation not supported",
	EDQUOT:          "Disk quota exceeded",
	ENOKEY:          "Required key not available",
	EKEYEXPIRED:     "Key has expired",
	EKEYREVOKED:     "Key has been revoked",
	EKEYREJECTED:    "Key was rejected by service",
}

// Error returns the C library's text for the errno (what strerror says on
// Linux), so that messages match keyutils' output byte for byte.
func (e Errno) Error() string {
	if s, ok := errnoText[e]; ok {
		return s
	}
	return fmt.Sprintf("Unknown error %d", uint16(e))
}

// Is lets errors.Is(err, syscall.Errno(n)) match on Linux, where the
// numbers agree.
func (e Errno) Is(target error) bool {
	var se syscall.Errno
	if errors.As(target, &se) {
		return uint16(se) == uint16(e) && sameNumbering
	}
	return false
}
