package intercept

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/wire"
)

// Install sets no_new_privs and installs Filter on the calling thread,
// returning the listener that receives its key calls. The thread, and
// every thread and process it starts afterwards (a program it execs,
// above all), is filtered; other threads of this process are not, so the
// caller locks its goroutine to its thread (runtime.LockOSThread) and
// calls or execs from there.
func Install() (listener int, err error) {
	prog := Filter()
	if prog == nil {
		return -1, ErrUnsupported
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("intercept: no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		if e == unix.EINVAL || e == unix.ENOSYS {
			return -1, fmt.Errorf("%w (seccomp: %v)", ErrUnsupported, e)
		}
		return -1, fmt.Errorf("intercept: seccomp: %w", e)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// IsListener reports whether fd is a seccomp listener: it knows the
// notification ioctls.
func IsListener(fd int) bool {
	var id uint64
	err := ioctl(uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id))
	return err == nil || err == unix.ENOENT
}

// notif is struct seccomp_notif.
type notif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

// notifResp is struct seccomp_notif_resp.
type notifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// A Listener serves the calls a seccomp listener receives.
type Listener struct {
	f   *os.File
	raw syscall.RawConn
	h   Handler
	mem memory
}

// NewListener takes the listener fd (which it closes when it is closed)
// and serves its calls with h.
func NewListener(fd int, h Handler) (*Listener, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Linux 6.6: the caller's processor is handed to the supervisor and
	// back instead of waking it across processors. Older kernels lack it;
	// calls then cost a cross-processor wake-up each way.
	_ = unix.IoctlSetInt(fd, unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	f := os.NewFile(uintptr(fd), "seccomp-listener")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Listener{f: f, raw: raw, h: h}, nil
}

// Close stops Serve and closes the listener: calls in flight fail with
// ENOSYS in their callers, as the kernel answers when the listener goes.
func (l *Listener) Close() error { return l.f.Close() }

// errGone reports that no filtered task is left.
var errGone = errors.New("intercept: every filtered task has exited")

// Serve answers calls until every task under the filter has exited (it
// returns nil then) or Close is called (os.ErrClosed).
func (l *Listener) Serve() error {
	var n notif
	for {
		var rerr error
		got := false
		err := l.raw.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, perr := unix.Poll(pfd, 0); perr != nil || k == 0 {
				return false // nothing yet: wait on the poller
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				rerr = errGone // POLLHUP: the filtered tasks are gone
				return true
			}
			n = notif{}
			if e := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); e != nil {
				if e == unix.ENOENT || e == unix.EINTR {
					return true // the caller went away meanwhile
				}
				rerr = e
				return true
			}
			got = true
			return true
		})
		switch {
		case err != nil:
			return err
		case rerr == errGone:
			return nil
		case rerr != nil:
			return fmt.Errorf("intercept: receive: %w", rerr)
		case got:
			l.answer(&n)
		}
	}
}

// answer serves one notification and sends its answer.
func (l *Listener) answer(n *notif) {
	val, errno := l.serve(n)
	r := notifResp{id: n.id, val: val}
	if errno != 0 {
		r.val, r.error = 0, -int32(errno)
	}
	_ = l.raw.Control(func(fd uintptr) {
		// ENOENT: the caller was killed or interrupted meanwhile; the
		// answer has nobody to go to.
		_ = ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
	})
}

// valid reports whether the notification is still pending: its caller
// has not been interrupted, and its pid is still the caller's.
func (l *Listener) valid(id uint64) bool {
	ok := false
	_ = l.raw.Control(func(fd uintptr) {
		ok = ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
	})
	return ok
}

func ioctl(fd uintptr, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// serve decodes a call, has the handler serve it and writes its results
// back, returning the system call's value or an errno.
func (l *Listener) serve(n *notif) (int64, syscall.Errno) {
	sysc, ok := syscallOf(n.arch, n.nr)
	if !ok {
		return 0, unix.ENOSYS
	}
	pid := int(n.pid)
	spec := wire.SyscallSpec(sysc, n.args[0])
	if spec == nil {
		// A keyctl command ukeys does not serve: what a kernel without
		// it answers.
		return 0, unix.EOPNOTSUPP
	}
	if spec.Indirect {
		return 0, unix.EOPNOTSUPP // its structures are not read yet
	}
	l.mem.pid = pid
	req, errno := decode(&l.mem, spec, &n.args)
	defer l.mem.release()
	if errno != 0 {
		return 0, errno
	}
	// The arguments were read from the memory of the task the
	// notification names: if it is no longer pending, that task may be
	// gone and its pid another's.
	if !l.valid(n.id) {
		return 0, unix.ENOENT
	}
	resp := l.h.Serve(Caller{Tid: pid, Pid: tgidOf(pid)}, req)
	defer func() {
		for _, b := range resp.Bufs {
			clear(b) // written into the caller's memory (or not): wiped here
		}
	}()
	if resp.Errno != 0 {
		return 0, syscall.Errno(resp.Errno)
	}
	return encode(&l.mem, spec, &n.args, resp)
}
