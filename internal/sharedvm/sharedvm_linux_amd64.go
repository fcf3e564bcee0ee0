package sharedvm

import (
	"syscall"
	"unsafe"
)

// Supported reports whether [Run] works on this platform.
const Supported = true

// Run makes calls, in order, in a child sharing this process's memory,
// while the calling thread waits, and returns the child's pid once the
// child has exited (with status 0) or exec'd (the last call an execve
// that succeeded), each call's result in its Ret. The child is reaped
// by the caller (it is this process's child, SIGCHLD at its exit).
func Run(calls []Call) (pid int, err error) {
	return start(calls, syscall.CLONE_VM|syscall.CLONE_VFORK|uintptr(syscall.SIGCHLD))
}

// RunThread makes calls, in order, in a new thread of this process,
// while the calling thread waits, and returns the thread's id once it
// has exited.
func RunThread(calls []Call) (tid int, err error) {
	return start(calls, syscall.CLONE_VM|syscall.CLONE_VFORK|syscall.CLONE_FS|syscall.CLONE_FILES|
		syscall.CLONE_SIGHAND|syscall.CLONE_THREAD|syscall.CLONE_SYSVSEM)
}

func start(calls []Call, flags uintptr) (int, error) {
	if len(calls) == 0 {
		return 0, syscall.EINVAL
	}
	r := run(unsafe.Pointer(&calls[0]), uintptr(len(calls)), flags)
	if int64(r) < 0 {
		return 0, syscall.Errno(-int64(r))
	}
	return int(r), nil
}

// run is in assembly: the child uses no stack at all, so that the
// caller's, which it shares, is as the caller left it.
func run(calls unsafe.Pointer, n, flags uintptr) uintptr
