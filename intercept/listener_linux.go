package intercept

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// Install sets no_new_privs and installs [Filter] on the calling thread,
// returning the listener that receives its key calls. The thread, and
// every thread and process it starts afterwards (a program it execs,
// above all), is filtered; other threads of this process are not, so the
// caller locks its goroutine to its thread ([runtime.LockOSThread]) and
// calls or execs from there.
func Install() (listener int, err error) { return install(0) }

// InstallAll is [Install] for every thread of this process at once
// (SECCOMP_FILTER_FLAG_TSYNC), for a program that makes key calls from
// several threads itself rather than exec another.
func InstallAll() (listener int, err error) {
	return install(unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH)
}

func install(flags uintptr) (listener int, err error) {
	prog := Filter()
	if prog == nil {
		return -1, ErrUnsupported
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("intercept: no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|flags, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		if e == unix.EINVAL || e == unix.ENOSYS {
			return -1, fmt.Errorf("%w (seccomp: %v)", ErrUnsupported, e)
		}
		return -1, fmt.Errorf("intercept: seccomp: %w", e)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// Available reports whether this kernel can hand a filtered call to a
// listener (SECCOMP_RET_USER_NOTIF, which it lists in
// /proc/sys/kernel/seccomp/actions_avail) for an ABI ukeys knows.
func Available() bool {
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	return err == nil && native.arch != 0 && slices.Contains(strings.Fields(string(b)), "user_notif")
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

// syncWakeUp asks for SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on every
// listener. UKEYS_INTERCEPT_SYNC_WAKEUP=0 in the environment leaves it
// off, to measure what a call costs on a kernel older than 6.6, which
// lacks it (ukeybench syscall; docs/figures.md, "Intercepted calls").
var syncWakeUp = os.Getenv("UKEYS_INTERCEPT_SYNC_WAKEUP") != "0"

// A Listener serves the calls a seccomp listener receives.
type Listener struct {
	fd    int // the listener
	wake  int // an eventfd that Close writes to end Serve
	h     Handler
	mem   memory
	tasks tasks // the callers' credentials and memory, kept between calls

	mu       sync.Mutex
	state    int           // idle, serving or closed
	done     chan struct{} // closed when Serve has returned, while serving
	detached bool          // Detach took the listener: Serve leaves it open
}

const (
	idle = iota
	serving
	closed
)

// NewListener takes the listener fd (which it closes when it is closed)
// and serves its calls with h.
func NewListener(fd int, h Handler) (*Listener, error) {
	// Linux 6.6: the caller's processor is handed to the supervisor and
	// back instead of waking it across processors, when the supervisor
	// waits on a thread of its own (Serve). Older kernels lack it; calls
	// then cost a cross-processor wake-up each way.
	if syncWakeUp {
		_ = unix.IoctlSetInt(fd, unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Listener{fd: fd, wake: wake, h: h}, nil
}

// Close stops [Listener.Serve] (and waits for it) and closes the listener:
// calls in flight fail with ENOSYS in their callers, as the kernel answers
// when the listener goes.
func (l *Listener) Close() error {
	l.stop(false)
	return nil
}

// Detach stops [Listener.Serve] between two calls (and waits for it), as
// [Listener.Close] does, but leaves the listener open and returns it, the
// caller's now: a daemon handing over gives it to the next one, which serves
// the calls that wait meanwhile (their callers stay blocked in them). A call
// being served when Detach is called is answered first.
func (l *Listener) Detach() (int, error) { return l.stop(true) }

// stop ends the listener's serving, leaving its descriptor open (and
// returning it) if detach.
func (l *Listener) stop(detach bool) (int, error) {
	l.mu.Lock()
	state := l.state
	if state == closed {
		l.mu.Unlock()
		return -1, os.ErrClosed
	}
	l.state, l.detached = closed, detach
	if state == serving {
		done := l.done
		var one [8]byte
		one[0] = 1
		unix.Write(l.wake, one[:])
		l.mu.Unlock()
		<-done // Serve's end closes what is to be closed
	} else {
		l.mu.Unlock()
		if !detach {
			unix.Close(l.fd)
		}
		unix.Close(l.wake)
	}
	if detach {
		return l.fd, nil
	}
	return -1, nil
}

// SetBudget bounds the descriptors the listener keeps of its callers
// (see [Budget]); without one, it keeps up to 256 of each kind. Call it
// before [Listener.Serve].
func (l *Listener) SetBudget(b Budget) { l.tasks.budget = b }

// Serve answers calls until every task under the filter has exited (it
// returns nil then) or [Listener.Close] is called ([os.ErrClosed]). It runs
// on a thread of its own, which waits for a call, serves it and answers it
// without handing it to another thread: with SYNC_WAKE_UP the caller's
// processor passes to it and back.
func (l *Listener) Serve() error {
	l.mu.Lock()
	if l.state != idle {
		l.mu.Unlock()
		return os.ErrClosed
	}
	l.state = serving
	l.done = make(chan struct{})
	l.mu.Unlock()
	defer func() {
		l.tasks.close()
		l.mu.Lock()
		if !l.detached {
			unix.Close(l.fd)
		}
		unix.Close(l.wake)
		l.state = closed
		close(l.done)
		l.mu.Unlock()
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var n notif
	pfd := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(l.wake), Events: unix.POLLIN}}
	for {
		pfd[0].Revents, pfd[1].Revents = 0, 0
		if _, err := unix.Poll(pfd, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("intercept: poll: %w", err)
		}
		if pfd[1].Revents != 0 {
			return os.ErrClosed
		}
		if pfd[0].Revents&unix.POLLIN == 0 {
			if pfd[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
				return nil // every filtered task has exited
			}
			continue
		}
		n = notif{}
		if e := ioctl(uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); e != nil {
			if e == unix.ENOENT || e == unix.EINTR {
				continue // the caller went away meanwhile
			}
			return fmt.Errorf("intercept: receive: %w", e)
		}
		l.answer(&n)
	}
}

// continueCall is serve's answer for a call the kernel is to run itself
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE): an ioctl the filter caught by its
// command number on a descriptor that is no notification pipe of the
// daemon's.
const continueCall = syscall.Errno(1 << 31)

// answer serves one notification and sends its answer.
func (l *Listener) answer(n *notif) {
	c := noCall
	// Closed once the caller has its answer: the descriptors a call
	// opened and no longer needs are not its to wait for (each close is
	// a system call, a microsecond or more where system calls are dear).
	defer c.end()
	val, errno := l.serve(n, &c)
	r := notifResp{id: n.id, val: val}
	if errno == continueCall {
		r.val, r.flags = 0, unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	} else if errno != 0 {
		r.val, r.error = 0, -int32(errno)
	}
	// ENOENT: the caller was killed or interrupted meanwhile; the answer
	// has nobody to go to.
	_ = ioctl(uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&r))
}

// valid reports whether the notification is still pending: its caller
// has not been interrupted, and its pid is still the caller's.
func (l *Listener) valid(id uint64) bool {
	return ioctl(uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

func ioctl(fd uintptr, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// callSpec returns the operation a key call carries, nil for a keyctl
// command ukeys does not serve.
func callSpec(sysc wire.Syscall, args *[6]uint64) *wire.Spec {
	if sysc == wire.SysKeyctl && args[0] == unix.KEYCTL_INSTANTIATE_IOV {
		// KEYCTL_INSTANTIATE with its payload gathered from an iovec.
		return wire.SpecOf(wire.OpInstantiate)
	}
	return wire.SyscallSpec(sysc, args[0])
}

// decodeCall reads a call's arguments from the caller's memory into a
// request of spec (callSpec's). With lazy, its payload is still to be
// read: a payload larger than a user key's is asked about before it is
// read (OpAddKeyCheck), so that one the type refuses by its length, or
// that the keyring or type refuses anyway, is never copied.
func decodeCall(m *memory, sysc wire.Syscall, spec *wire.Spec, args *[6]uint64) (req *wire.Request, lazy bool, errno syscall.Errno) {
	if sysc == wire.SysKeyctl && args[0] == unix.KEYCTL_INSTANTIATE_IOV {
		req, errno = decodeIOV(m, args)
		return req, false, errno
	}
	if sysc == wire.SysKeyctl && args[0] == unix.KEYCTL_INSTANTIATE && args[2] == 0 {
		// The kernel takes a null payload as none, whatever length
		// comes with it (keyctl_instantiate_key: "_payload && plen").
		a := *args
		a[3] = 0
		args = &a
	}
	lazy = sysc == wire.SysAddKey && args[3] > keyctl.MaxUserPayload && args[3] <= maxPayload
	req, errno = decode(m, spec, args, lazy)
	return req, lazy, errno
}

// instantiateFault answers an instantiation whose payload the caller
// could not give (its bytes within user space, but not readable). The
// kernel copies the payload only once it has found the caller's
// authority to instantiate key id (the request_key_auth it assumed, for
// that key): without it the call fails with EPERM, and only with it with
// EFAULT. The daemon is asked as the caller: the authority it holds
// (KEY_SPEC_REQKEY_AUTH_KEY) and the key that authority is for (its
// description, the key's serial in hexadecimal).
func (l *Listener) instantiateFault(caller Caller, id int32) syscall.Errno {
	auth := l.h.Serve(caller, &wire.Request{Op: wire.OpGetKeyringID, Ints: []int64{int64(keyctl.ReqKeyAuthKey), 0}})
	if auth.Errno != 0 || len(auth.Ints) == 0 {
		return unix.EPERM
	}
	d := l.h.Serve(caller, &wire.Request{Op: wire.OpDescribe, Ints: []int64{auth.Ints[0]}})
	if d.Errno != 0 || len(d.Bufs) == 0 {
		return unix.EPERM
	}
	desc := string(d.Bufs[0])
	if i := strings.LastIndexByte(desc, ';'); i < 0 || desc[i+1:] != strconv.FormatUint(uint64(uint32(id)), 16) {
		return unix.EPERM
	}
	return unix.EFAULT
}

// serve decodes a call, has the handler serve it and writes its results
// back, returning the system call's value or an errno. What it opens of
// the caller it leaves in c, for answer to close.
func (l *Listener) serve(n *notif, c *call) (int64, syscall.Errno) {
	if n.arch == native.arch {
		switch uint32(n.nr) {
		case native.pipe2:
			return l.servePipe2(n)
		case native.ioctl:
			return l.serveIoctl(n)
		}
	}
	sysc, ok := syscallOf(n.arch, n.nr)
	if !ok {
		return 0, unix.ENOSYS
	}
	pid := int(n.pid)
	spec := callSpec(sysc, &n.args)
	if spec == nil {
		// A keyctl command ukeys does not serve: what a kernel without
		// it answers.
		return 0, unix.EOPNOTSUPP
	}
	// The thread's credentials now, as the kernel would check them, and
	// its memory, opened for this call if it writes results.
	st, cc, errno := l.tasks.read(pid, n.ip, spec.Result.BufReg != 0)
	*c = cc
	if errno != 0 {
		return 0, errno
	}
	// Whether its capabilities count is learnt only if a capability is
	// checked (Caller.CapsCount).
	var userNS *userNSCheck
	if st.CapEff != 0 {
		userNS = &userNSCheck{l: l, pid: pid, id: n.id}
		defer userNS.end()
	}
	l.mem.pid = pid
	l.mem.out.fd, l.mem.out.ok = c.mem, c.mem >= 0
	req, lazy, errno := decodeCall(&l.mem, sysc, spec, &n.args)
	defer l.mem.release()
	var pipe *WatchPipe
	if spec.Op == wire.OpWatchKey {
		// The queue is named by a descriptor of the caller's: looked up
		// before the call is proved pending, so that the descriptor table
		// read was the caller's.
		pipe = pipeOf(pid, n.args[2])
	}
	// An instantiation whose payload cannot be read: EPERM before EFAULT
	// (instantiateFault), which needs the caller proved first.
	askAuthority := errno == unix.EFAULT && l.mem.payloadFault && spec.Op == wire.OpInstantiate
	if errno != 0 && !askAuthority {
		return 0, errno
	}
	// The arguments, credentials and memory were read and opened from
	// the task the notification names: if the call is no longer pending,
	// that task may be gone and its tid another's. If it is, the memory
	// opened is the caller's, and results written through it reach the
	// caller or nobody, however long the handler takes and whatever
	// becomes of the caller meanwhile.
	if !l.valid(n.id) {
		return 0, unix.ENOENT
	}
	exec := l.tasks.commit(c)
	caller := Caller{Tid: pid, Pid: st.Tgid, Task: c.tv.task, Status: st, userNS: userNS, Exec: exec, Pipe: pipe}
	if askAuthority {
		return 0, l.instantiateFault(caller, int32(uint32(n.args[1])))
	}
	if lazy {
		check := &wire.Request{Op: wire.OpAddKeyCheck, Bufs: req.Bufs[:2], Ints: []int64{int64(n.args[3]), req.Ints[0]}}
		if resp := l.h.Serve(caller, check); resp.Errno != 0 {
			return 0, syscall.Errno(resp.Errno)
		}
		b, errno := l.mem.read(n.args[2], int(n.args[3]))
		if errno != 0 {
			return 0, errno
		}
		req.Bufs[2] = b
		if !l.valid(n.id) {
			return 0, unix.ENOENT // read from a task that may no longer be the caller
		}
	}
	resp := l.h.Serve(caller, req)
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

// userNSCheck learns, once, whether an intercepted call's thread is in
// the daemon's user namespace, while the call is pending. It is asked
// from the handler, which may ask from goroutines of its own.
type userNSCheck struct {
	l   *Listener
	pid int
	id  uint64

	mu sync.Mutex
	// asked: the question was answered (in), or the call was (ended).
	asked, in bool
}

// counts reports whether the thread is in the daemon's user namespace.
// The namespace is read after the status, and proved the caller's by the
// check that the call is still pending, made after it: a thread cannot
// return to an ancestor namespace (setns(2) there needs CAP_SYS_ADMIN in
// it), and one blocked in a call cannot leave its own, so one found in
// the daemon's now was there when its status was read.
func (u *userNSCheck) counts() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.asked {
		u.asked = true
		u.in = procfs.InOwnUserNS(u.pid) && u.l.valid(u.id)
	}
	return u.in
}

// end closes the question, before the call is answered: asked later, of
// a thread that may be making other calls, or none, the answer is no,
// even if it was yes during the call.
func (u *userNSCheck) end() {
	u.mu.Lock()
	u.asked, u.in = true, false
	u.mu.Unlock()
}
