// Package intercept serves the kernel's own key system calls (add_key,
// request_key, keyctl) of a program that runs under a seccomp filter
// which hands them to a supervisor (SECCOMP_RET_USER_NOTIF,
// seccomp_unotify(2)). It is the daemon's second way in, beside the
// socket that package server accepts: a program that was never written
// for ukeys makes its usual calls, and they are answered from the same
// store as the kernel would answer them.
//
// [Filter] builds the filter, [Install] installs it on the calling
// thread and returns the listener's descriptor, and a [Listener]
// receives each call, decodes its arguments from the caller's memory
// through the operation table of package wire ([wire.SyscallSpec]), has
// a [Handler] serve the request, writes the results into the caller's
// buffers as the kernel would, and answers with the kernel's return
// value or errno. The Handler is shaped like net/http's: one method,
// Serve, given who called ([Caller]) and what was asked (a
// [wire.Request]), with [HandlerFunc] to adapt a function; the listener
// knows nothing of keys, so the daemon's dispatch, a test's fake or a
// policy that refuses everything all plug in the same way.
//
// The caller's memory is read with process_vm_readv and written with
// process_vm_writev, and every notification is checked to be still alive
// (SECCOMP_IOCTL_NOTIF_ID_VALID) after its arguments are read, so that a
// caller whose pid was reused meanwhile is not answered with another's
// memory.
//
// A listener can be handed to another process ([SendListener],
// [HandOff], [ReceiveListener]) so that a restarting daemon keeps its
// intercepted programs, and [WatchPipe] is the notification pipe the
// listener makes for an intercepted pipe2(O_NOTIFICATION_PIPE).
//
// It is Linux's: elsewhere [Install] and [NewListener] fail with
// [ErrUnsupported].
package intercept
