// Package intercept serves the kernel's own key system calls (add_key,
// request_key, keyctl) of a program that runs under a seccomp filter
// which hands them to a supervisor (SECCOMP_RET_USER_NOTIF,
// seccomp_unotify(2)): Filter builds the filter, Install installs it on
// the calling thread and returns the listener, and a Listener receives
// each call, decodes its arguments from the caller's memory through the
// operation table of package wire (wire.SyscallSpec), has a Handler serve
// the request, writes the results into the caller's buffers as the
// kernel would, and answers with the kernel's return value or errno.
//
// The caller's memory is read with process_vm_readv and written with
// process_vm_writev, and every notification is checked to be still alive
// (SECCOMP_IOCTL_NOTIF_ID_VALID) after its arguments are read, so that a
// caller whose pid was reused meanwhile is not answered with another's
// memory.
//
// It is Linux's: elsewhere Install fails with ErrUnsupported.
package intercept
