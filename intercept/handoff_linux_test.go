package intercept_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/wire"
)

// handOffRounds is how many times handOffChild offers the runtime a
// reason to move its goroutine to another thread.
const handOffRounds = 20

// handOffChild hands its listener over with HandOff (one thread's
// filter) from a goroutine it has not locked itself, then, round after
// round, leaves its thread busy with goroutines blocked in a read while
// it sleeps, and asks for @s: the handler answers 777 to every call, the
// kernel anything else. It says how many the kernel answered.
func handOffChild() int {
	if err := intercept.HandOff(3, false); err != nil {
		fmt.Println("install:", err)
		return 1
	}
	kernel := 0
	for range handOffRounds {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			fmt.Println("pipe:", err)
			return 1
		}
		// Blocking reads (the pipe is not the poller's): a thread each,
		// among them, unless this goroutine keeps it, the thread it
		// leaves to sleep, which the runtime gives the newest goroutine.
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				var b [1]byte
				unix.Read(p[0], b[:])
			})
		}
		time.Sleep(2 * time.Millisecond)
		r, _, _ := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0)
		if int32(r) != 777 {
			kernel++
		}
		unix.Close(p[1]) // the readers' end of file
		wg.Wait()
		unix.Close(p[0])
	}
	fmt.Printf("calls the kernel answered: %d of %d\n", kernel, handOffRounds)
	return 0
}

// Once HandOff returns, the caller's key calls are the supervisor's,
// however long the program runs: the filter is the calling thread's
// alone, and HandOff holds the calling goroutine to that thread. It did
// not, and a program that slept or blocked after its first calls went
// on, whenever the Go runtime resumed it on another thread, with the
// kernel's keyrings instead of the daemon's: a child of the server's
// tests that joined a session, slept 1.2 s and read @s again found the
// kernel's session keyring in about half its runs, as if the daemon had
// forgotten it.
func TestHandOffKeepsTheCallerOnItsFilteredThread(t *testing.T) {
	cmd, ours, fd, out := startChild(t, "handoff")
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		return &wire.Response{Ints: []int64{777}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := serveChild(t, l, cmd, ours, out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	l.Close()
	if want := fmt.Sprintf("calls the kernel answered: 0 of %d\n", handOffRounds); out.String() != want {
		t.Fatalf("the child said %q, want %q", strings.TrimSpace(out.String()), want)
	}
}
