package intercept

import (
	"errors"

	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/wire"
)

// ErrUnsupported reports a system without seccomp user notification.
var ErrUnsupported = errors.New("intercept: seccomp user notification is not supported here")

// Caller is who made an intercepted call: the thread (Tid) and its
// process (Pid), as the supervisor's pid namespace sees them, with the
// thread's credentials as they were at the call.
type Caller struct {
	Tid, Pid int
	// Status is the thread's /proc status, read for this call while the
	// call was pending: its ids and groups are the ones the kernel would
	// check. Its effective capabilities are relative to the thread's own
	// user namespace: [Caller.CapsCount] says whether they count.
	Status procfs.Status
	// userNS, for a thread whose status shows capabilities, learns
	// whether they count ([Caller.CapsCount]); nil for one that shows
	// none.
	userNS *userNSCheck
	// Exec says that the process has run another program (execve) since
	// the listener last served it, as far as the listener can tell: the
	// memory its last call ran in no longer maps this call's
	// instruction pointer. The kernel drops a process's thread and
	// process keyrings at exec. (An exec whose old memory lives on in
	// another process mapping the same code is not seen here: the
	// daemon sees those by the process events it follows.)
	Exec bool
	// Task numbers the calling thread as the task it is: never 0, and
	// never given to another task, by this listener or any other. Where
	// the kernel gives tasks identities (pidfs, Linux 6.9), it is the
	// kernel's identity of the thread (its pidfd's inode number), which
	// the thread keeps from call to call and from listener to listener;
	// elsewhere a number the listener gives the thread, which it keeps
	// unless the listener has had to forget it (it keeps 256 threads'
	// descriptors). So the same Task as at an earlier call proves that
	// the caller is the thread that made it, and that Pid is still the
	// process it was, without asking the kernel again: the listener's
	// descriptor of the thread's /proc status, read for this call, can
	// read only the task it was opened on.
	Task uint64
	// Pipe is the notification pipe a KEYCTL_WATCH_KEY call names by its
	// descriptor, if the daemon made it (an intercepted
	// pipe2(O_NOTIFICATION_PIPE)); nil for any other descriptor, and for
	// every other call.
	Pipe *WatchPipe
}

// A Handler serves one decoded call as the daemon serves a request from
// its socket. The request's buffers are wiped once the handler returns;
// the response's are copied into the caller's memory and then wiped.
type Handler interface {
	Serve(c Caller, r *wire.Request) *wire.Response
}

// HandlerFunc adapts a function to a [Handler].
type HandlerFunc func(c Caller, r *wire.Request) *wire.Response

// Serve calls f.
func (f HandlerFunc) Serve(c Caller, r *wire.Request) *wire.Response { return f(c, r) }

// A Budget is what a listener draws on for the descriptors it keeps of
// its callers between calls (a thread's /proc status, a witness of the
// memory a process last called from, through which nothing is ever read
// or written of the process's data): the daemon charges them to the uid
// the listener serves, as it charges the processes it keeps, so that one
// uid's callers cannot fill the daemon's descriptor table. A listener
// that cannot take one keeps none for that caller, and serves it all the
// same: it opens what it needs at each call, and tells no exec of that
// process.
type Budget interface {
	// Take asks for one more kept descriptor.
	Take() bool
	// Give returns one.
	Give()
}

// A PipeBudget is a [Budget] that also bounds the notification pipes the
// listener makes for its callers (a descriptor of the daemon's each,
// kept until every reader has closed the pipe): a pipe is drawn with
// TakePipe, from the uid's whole bound as a process it keeps would be,
// rather than with Take from the share of it that the listener may keep
// of its callers, which a busy listener fills. Give returns either.
type PipeBudget interface {
	Budget
	TakePipe() bool
}

// CapsCount reports whether the thread's effective capabilities
// (Status.CapEff) count: whether the thread is in the daemon's user
// namespace. A process that made a user namespace of its own (unshare
// -U, open to every user) has every capability there, and its status
// shows them as if they were the host's, but the kernel counts them only
// in the initial namespace. Learnt at the first question, once per call
// (a system call most calls, which check no capability, are spared), and
// only while the call is still pending: false once it has been answered,
// and wherever the namespace cannot be read.
func (c *Caller) CapsCount() bool {
	return c.userNS != nil && c.userNS.counts()
}
