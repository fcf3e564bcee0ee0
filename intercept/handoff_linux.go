package intercept

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// SendListener hands the listener fd to the process at the other end of
// the Unix stream socket conn (SCM_RIGHTS, with one byte), as a program
// that has installed the filter on itself gives its listener to its
// supervisor. The descriptor stays the caller's to close.
func SendListener(conn, fd int) error {
	return unix.Sendmsg(conn, []byte{1}, unix.UnixRights(fd), nil, 0)
}

// HandOff is the whole of a supervised program's side: it installs the
// filter on the calling thread ([Install]; on every thread of the process
// with all, [InstallAll]), sends the listener to the supervisor at the
// other end of the Unix stream socket conn, closes this process's copy,
// and waits for the one byte with which the supervisor says it serves.
// Once it returns, the caller's key calls are the supervisor's.
//
// Without all, that holds because HandOff locks the calling goroutine
// to the filtered thread ([runtime.LockOSThread]) for good: the runtime
// would otherwise resume it after any sleep or blocking call on whichever
// thread is free, one the filter is not on, and its key calls would go
// to the kernel's keyrings from then on.
func HandOff(conn int, all bool) error {
	install := Install
	if all {
		install = InstallAll
	} else {
		runtime.LockOSThread()
	}
	fd, err := install()
	if err != nil {
		if !all {
			runtime.UnlockOSThread() // no filter: the thread is like any other
		}
		return err
	}
	err = SendListener(conn, fd)
	unix.Close(fd)
	if err == nil {
		var word [1]byte
		_, err = unix.Read(conn, word[:])
	}
	if err != nil {
		return fmt.Errorf("intercept: hand-off: %w", err)
	}
	return nil
}

// errNoListener reports a message that carried no descriptor.
var errNoListener = errors.New("intercept: no listener came with the message")

// ReceiveListener receives a listener that [SendListener] sent on conn; the
// caller owns it.
func ReceiveListener(conn int) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(conn, make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, errNoListener
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, errNoListener
	}
	return fds[0], nil
}
