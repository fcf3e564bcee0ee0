package nice

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// expensiveNice is the nice level of the threads that run expensive
// operations: the lowest priority, so that while one runs the kernel
// gives the processors to every other thread of the machine first (the
// daemon's serving ones and other programs'), as the kernel's own
// signature checks are charged to the calling task's nice level and not
// to everyone's.
const expensiveNice = 19

// Run runs f on a thread of its own at expensiveNice and waits for
// it. The goroutine locks its thread and exits without unlocking it, so
// that Go ends the thread with it and no goroutine ever runs on a thread
// left at that priority; a new thread costs little beside an operation
// that is expensive. The process's main thread is never lowered: Go
// parks it for good instead of ending it, and its nice level is the one
// ps and top show for the daemon. Where the priority cannot be lowered,
// f runs all the same.
func Run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if tid := unix.Gettid(); tid != unix.Getpid() &&
			unix.Setpriority(unix.PRIO_PROCESS, tid, expensiveNice) == nil {
			f()
			return // still locked: the thread ends here
		}
		runtime.UnlockOSThread()
		f()
	}()
	<-done
}
