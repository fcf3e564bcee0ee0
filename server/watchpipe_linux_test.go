package server_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	kc "github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func init() {
	testChildren["watchpipe"] = watchPipeChild
	testChildren["watchpipe-loss"] = watchPipeLossChild
	testChildren["watchpipe-errors"] = watchPipeErrorsChild
}

const (
	iocWatchQueueSetSize   = 0x5760
	iocWatchQueueSetFilter = 0x5761
)

// notificationPipe makes a notification pipe of size records, as
// keyutils' keyctl watch does (pipe2(O_NOTIFICATION_PIPE | O_NONBLOCK),
// then IOC_WATCH_QUEUE_SET_SIZE), and returns its read end.
func notificationPipe(size int) int {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_EXCL|unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		fmt.Println("pipe2:", err)
		os.Exit(0)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fds[0]), iocWatchQueueSetSize, uintptr(size)); e != 0 {
		fmt.Println("set size:", e)
		os.Exit(0)
	}
	return fds[0]
}

// readRecords reads what the pipe holds, waiting up to a second for the
// first record and a moment for each next, and prints each record as
// keyutils' consumer logs it ("<key> <event> [<aux>]", "<key> gc",
// "-- LOSS --") with its watch id.
func readRecords(fd int, wait time.Duration) {
	buf := make([]byte, 433) // keyutils' read size, no multiple of a record's
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, int(wait/time.Millisecond)); n <= 0 {
			return
		}
		wait = 200 * time.Millisecond
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			fmt.Println("read:", n, err)
			return
		}
		for b := buf[:n]; len(b) > 0; {
			note, loss, known, size, err := kc.ParseRecord(b)
			if err != nil {
				fmt.Printf("bad record % x\n", b)
				return
			}
			switch {
			case loss:
				fmt.Println("-- LOSS --")
			case !known:
				fmt.Printf("other record % x\n", b[:size])
			case note.Kind == kc.NotifyLinked || note.Kind == kc.NotifyUnlinked:
				fmt.Printf("w%d %s %s %s\n", note.WatchID, name(note.Key), note.Kind, name(kc.Serial(note.Aux)))
			case note.Kind == kc.NotifyInstantiated && note.Aux != 0:
				fmt.Printf("w%d %s %s %d\n", note.WatchID, name(note.Key), note.Kind, note.Aux)
			default:
				fmt.Printf("w%d %s %s\n", note.WatchID, name(note.Key), note.Kind)
			}
			b = b[size:]
		}
	}
}

// names are the serials a child made, by the names it prints them as.
var names = map[kc.Serial]string{}

func name(s kc.Serial) string {
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprint(int32(s))
}

func newKey(typ, desc, payload string, ring kc.Serial) kc.Serial {
	var p uintptr
	if payload != "" {
		p = cstr(payload)
	}
	id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr(typ), cstr(desc), p, uintptr(len(payload)), uintptr(int32(ring)), 0)
	if e != 0 {
		fmt.Println("add_key:", e)
		os.Exit(0)
	}
	names[kc.Serial(id)] = desc
	return kc.Serial(id)
}

func watch(id kc.Serial, fd, watchID int) {
	if n, s := keyctl(unix.KEYCTL_WATCH_KEY, uintptr(id), uintptr(fd), uintptr(int64(watchID))); n < 0 {
		fmt.Println("watch:", s)
	}
}

// watchPipeChild makes each kind of key record come, through a
// notification pipe the daemon made: a keyring's link, unlink and
// clear; a key's update, attributes, revocation and invalidation; the
// removal of a watch, and of a watched key.
func watchPipeChild() {
	startIntercepted(false)
	fd := notificationPipe(256)
	ring := newKey("keyring", "ring", "", kc.SessionKeyring)
	watch(ring, fd, 1)
	k := newKey("user", "k", "one", ring)
	watch(k, fd, 2)
	newKey("user", "k", "two", ring) // an update of k
	keyctl(unix.KEYCTL_SETPERM, uintptr(k), 0x3f3f0000)
	ur := kc.SessionKeyring
	keyctl(unix.KEYCTL_LINK, uintptr(k), uintptr(ur)) // kept alive
	keyctl(unix.KEYCTL_UNLINK, uintptr(k), uintptr(ring))
	keyctl(unix.KEYCTL_LINK, uintptr(k), uintptr(ring))
	keyctl(unix.KEYCTL_REVOKE, uintptr(k))
	k2 := newKey("user", "k2", "three", ring)
	watch(k2, fd, 3)
	keyctl(unix.KEYCTL_INVALIDATE, uintptr(k2))
	keyctl(unix.KEYCTL_CLEAR, uintptr(ring))
	watch(ring, fd, -1) // the watch's removal
	readRecords(fd, time.Second)
	// A filter that passes links alone (as keyctl watch -fl sets it).
	f := filter(kc.WatchTypeKeyNotify, 1<<kc.NotifyLinked)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocWatchQueueSetFilter, uintptr(unsafe.Pointer(&f[0]))); e != 0 {
		fmt.Println("set filter:", e)
	}
	watch(ring, fd, 4)
	k3 := newKey("user", "k3", "four", ring)
	keyctl(unix.KEYCTL_SETPERM, uintptr(ring), 0x3f3f0000)
	keyctl(unix.KEYCTL_UNLINK, uintptr(k3), uintptr(ring))
	fmt.Println("filtered:")
	readRecords(fd, time.Second)
}

// filter is a watch_notification_filter of one rule.
func filter(typ, subtypes uint32) []byte {
	b := make([]byte, 8+44)
	putU32 := func(at int, v uint32) {
		b[at], b[at+1], b[at+2], b[at+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	putU32(0, 1) // one rule
	putU32(8, typ)
	putU32(8+12, subtypes)
	return b
}

// watchPipeLossChild lets more records come than the pipe holds, then
// reads them: the pipe's size in records, then a loss record, then what
// came once there was room again.
func watchPipeLossChild() {
	startIntercepted(false)
	fd := notificationPipe(1) // rounded up to a page of notes: 32
	ring := newKey("keyring", "ring", "", kc.SessionKeyring)
	watch(ring, fd, 1)
	for i := range 40 {
		newKey("user", fmt.Sprint("k", i), "x", ring)
	}
	buf := make([]byte, 64)
	read := 0
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 1000); n <= 0 {
			break
		}
		n, err := unix.Read(fd, buf)
		if err != nil {
			break
		}
		_, loss, _, _, _ := kc.ParseRecord(buf[:n])
		if loss {
			fmt.Printf("%d records, then a loss record\n", read)
			newKey("user", "after", "x", ring)
			read = 0
			continue
		}
		read++
	}
	fmt.Printf("%d records after it\n", read)
}

// watchPipeErrorsChild makes the calls a notification pipe refuses.
func watchPipeErrorsChild() {
	startIntercepted(false)
	var fds [2]int
	errno := func(e syscall.Errno) string {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	ioctl := func(fd int, cmd, arg uintptr) string {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, arg)
		return errno(e)
	}
	e := unix.Pipe2(fds[:], unix.O_EXCL|0x4000000) // a flag pipe2 does not know
	fmt.Println("pipe2 with an unknown flag:", e)
	_, _, e2 := unix.Syscall(unix.SYS_PIPE2, 8, unix.O_EXCL, 0)
	fmt.Println("pipe2 into unmapped memory:", errno(e2))
	if err := unix.Pipe2(fds[:], unix.O_EXCL); err != nil {
		fmt.Println("pipe2:", err)
		return
	}
	fmt.Println("size 0:", ioctl(fds[0], iocWatchQueueSetSize, 0))
	fmt.Println("size 513:", ioctl(fds[0], iocWatchQueueSetSize, 513))
	fmt.Println("size 256:", ioctl(fds[0], iocWatchQueueSetSize, 256))
	fmt.Println("size again:", ioctl(fds[0], iocWatchQueueSetSize, 128))
	bad := filter(kc.WatchTypeKeyNotify, 1)
	bad[0] = 17 // more rules than the kernel takes
	fmt.Println("filter of 17 rules:", ioctl(fds[0], iocWatchQueueSetFilter, uintptr(unsafe.Pointer(&bad[0]))))
	bad = filter(kc.WatchTypeKeyNotify, 1)
	bad[8+8] = 0x7f // a mask over the record's length
	fmt.Println("filter masking the length:", ioctl(fds[0], iocWatchQueueSetFilter, uintptr(unsafe.Pointer(&bad[0]))))
	fmt.Println("filter unmapped:", ioctl(fds[0], iocWatchQueueSetFilter, 8))
	fmt.Println("no filter:", ioctl(fds[0], iocWatchQueueSetFilter, 0))
	_, werr := unix.Write(fds[1], []byte("forged record..."))
	fmt.Println("write to the pipe:", werr)
	var plain [2]int
	unix.Pipe2(plain[:], 0)
	fmt.Println("size of an ordinary pipe:", ioctl(plain[0], iocWatchQueueSetSize, 256))
	ring := newKey("keyring", "ring", "", kc.SessionKeyring)
	_, s := keyctl(unix.KEYCTL_WATCH_KEY, uintptr(ring), uintptr(plain[0]), 1)
	fmt.Println("watch into an ordinary pipe:", s)
	_, s = keyctl(unix.KEYCTL_WATCH_KEY, 0x7ffffff0, uintptr(plain[0]), 1)
	fmt.Println("watch of no key into an ordinary pipe:", s)
	_, s = keyctl(unix.KEYCTL_WATCH_KEY, uintptr(ring), uintptr(fds[0]), 256)
	fmt.Println("watch id 256:", s)
	watch(ring, fds[0], 1)
	_, s = keyctl(unix.KEYCTL_WATCH_KEY, uintptr(ring), uintptr(fds[0]), 2)
	fmt.Println("a second watch of the key:", s)
	_, s = keyctl(unix.KEYCTL_WATCH_KEY, uintptr(newKey("user", "u", "x", ring)), uintptr(fds[0]), ^uintptr(0))
	fmt.Println("removing a watch never set:", s)
}

// runWatched runs child role as ukeyctl run does (notification pipes
// served), and returns what it printed; the server's pipes must all
// have ended with the child.
func runWatched(t *testing.T, role string) string {
	t.Helper()
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	defer srv.Shutdown(t.Context())
	said := runFiltered(t, role, srv.ServeNotifyListener)
	// The pipes end once their readers have: their watches go.
	for deadline := time.Now().Add(5 * time.Second); server.WatchPipes(srv) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d notification pipes still posted to after the child exited", server.WatchPipes(srv))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return said
}

// Each kind of record keyutils' keyctl watch logs, in the kernel's
// layout, through a notification pipe the daemon made for an
// intercepted program: pipe2(O_NOTIFICATION_PIPE) and the watch queue's
// ioctls are the daemon's to serve, and KEYCTL_WATCH_KEY binds a key to
// the pipe the caller names. (This kernel may have no watch queues of
// its own: the records are those of include/uapi/linux/watch_queue.h
// and keyutils' expectations, tests/toolbox.inc.sh.)
func TestInterceptedWatchRecords(t *testing.T) {
	want := strings.Join([]string{
		"w1 ring link k",
		"w2 k upd",
		"w2 k attr",
		"w1 ring unlk k",
		"w1 ring link k",
		"w2 k rev",
		"w1 ring link k2",
		"w3 k2 inv",
		"w1 ring clr",
		"w1 ring gc", // the watch removed: a removal record naming the key
		"filtered:",
		"w4 ring link k3",
		"",
	}, "\n")
	got := runWatched(t, "watchpipe")
	// The keys the collector destroys (k2, invalidated, and k once the
	// test exits) end their watches with a removal record each, at a
	// time of their own, which the test does not pin.
	var kept []string
	for _, l := range strings.Split(got, "\n") {
		if l == "w2 k gc" || l == "w3 k2 gc" {
			continue
		}
		kept = append(kept, l)
	}
	if g := strings.Join(kept, "\n"); g != want {
		t.Fatalf("records:\n%s\nwant:\n%s", got, want)
	}
}

// A pipe that fills loses records as the kernel's does: the reader gets
// as many as the queue holds (its size rounded up to a page of 32
// notes), then one loss record once it has made room, then what came
// after.
func TestInterceptedWatchLoss(t *testing.T) {
	want := "32 records, then a loss record\n1 records after it\n"
	if got := runWatched(t, "watchpipe-loss"); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// The refusals of the watch queue's calls are the kernel's
// (watch_queue_set_size, watch_queue_set_filter, keyctl_watch_key,
// get_watch_queue); an ioctl on an ordinary pipe is the kernel's own.
func TestInterceptedWatchErrors(t *testing.T) {
	var plain [2]int
	if err := unix.Pipe2(plain[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	_, _, kernel := unix.Syscall(unix.SYS_IOCTL, uintptr(plain[0]), iocWatchQueueSetSize, 256)
	unix.Close(plain[0])
	unix.Close(plain[1])
	want := strings.Join([]string{
		"pipe2 with an unknown flag: invalid argument",
		"pipe2 into unmapped memory: EFAULT",
		"size 0: EINVAL",
		"size 513: EINVAL",
		"size 256: ok",
		"size again: EBUSY",
		"filter of 17 rules: EINVAL",
		"filter masking the length: EINVAL",
		"filter unmapped: EFAULT",
		"no filter: ok",
		"write to the pipe: bad file descriptor",
		"size of an ordinary pipe: " + unix.ErrnoName(kernel),
		"watch into an ordinary pipe: " + unix.EINVAL.Error(),
		"watch of no key into an ordinary pipe: " + unix.ENOKEY.Error(),
		"watch id 256: " + unix.EINVAL.Error(),
		"a second watch of the key: " + unix.EBUSY.Error(),
		"removing a watch never set: " + unix.EBADSLT.Error(),
		"",
	}, "\n")
	if got := runWatched(t, "watchpipe-errors"); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func init() { testChildren["watchpipe-handover"] = watchPipeHandoverChild }

// watchPipeHandoverChild watches a keyring through a notification pipe,
// and, once told (a line on standard input), links a key into it and
// reads what came.
func watchPipeHandoverChild() {
	startIntercepted(false)
	fd := notificationPipe(256)
	f := filter(kc.WatchTypeKeyNotify, 1<<kc.NotifyLinked) // links alone
	unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocWatchQueueSetFilter, uintptr(unsafe.Pointer(&f[0])))
	ring := newKey("keyring", "ring", "", kc.SessionKeyring)
	watch(ring, fd, 1)
	fmt.Println("watching")
	bufio.NewReader(os.Stdin).ReadString('\n')
	k := newKey("user", "k", "x", ring)
	keyctl(unix.KEYCTL_SETPERM, uintptr(k), 0x3f3f0000) // filtered out
	readRecords(fd, time.Second)
}

// A program under ukeyctl run keeps its notification pipe across a
// hand-over: the pipe's write end, its filter and the watches on it go
// to the new daemon, whose keys post into it.
func TestHandOverWatchPipe(t *testing.T) {
	path := t.TempDir() + "/ukeyd.sock"
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	c := startChild(t, "watchpipe-handover")
	defer c.cmd.Wait()
	served := make(chan error, 1)
	go func() { served <- oldSrv.ServeNotifyListener(c.listener) }()
	c.begin()
	lines, in, cmd := c.lines, c.in, c.cmd
	if !lines.Scan() || lines.Text() != "watching" {
		t.Fatalf("before the hand-over: %q", lines.Text())
	}
	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	<-served
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	fmt.Fprintln(in)
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	if want := "w1 ring link k"; strings.Join(got, "\n") != want {
		t.Fatalf("after the hand-over: %q, want %q", got, want)
	}
	in.Close()
	cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for deadline := time.Now().Add(5 * time.Second); server.WatchPipes(res.Server) != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := server.WatchPipes(res.Server); n != 0 {
		t.Errorf("%d notification pipes left after the program exited", n)
	}
	res.Server.Shutdown(ctx)
	<-newServed
	<-oldServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}

func init() {
	testChildren["watchpipe-thread-handover"] = watchPipeThreadHandoverChild
	if os.Getenv("UKEYS_TEST_CHILD") == "watchpipe-thread-handover" {
		// The leader stays on the main goroutine, so that the thread
		// that calls is another thread, with a caller of its own.
		runtime.LockOSThread()
	}
}

// watchPipeThreadHandoverChild makes a key from a thread other than the
// first, and, once told (a line on standard input), watches it from that
// same thread through a notification pipe, links a key into it and
// reads what came.
func watchPipeThreadHandoverChild() {
	startIntercepted(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		fd := notificationPipe(256)
		f := filter(kc.WatchTypeKeyNotify, 1<<kc.NotifyLinked) // links alone
		unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocWatchQueueSetFilter, uintptr(unsafe.Pointer(&f[0])))
		ring := newKey("keyring", "ring", "", kc.SessionKeyring)
		fmt.Println("made")
		bufio.NewReader(os.Stdin).ReadString('\n')
		watch(ring, fd, 1)
		newKey("user", "k", "x", ring)
		readRecords(fd, time.Second)
	}()
	<-done
}

// A thread of a program under ukeyctl run that a daemon met before
// handing over watches through a notification pipe afterwards: its
// caller, handed over with its thread keyring, is still an intercepted
// thread's, whose watches go to the pipe the call names.
func TestHandOverThreadWatchPipe(t *testing.T) {
	path := t.TempDir() + "/ukeyd.sock"
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	c := startChild(t, "watchpipe-thread-handover")
	defer c.cmd.Wait()
	served := make(chan error, 1)
	go func() { served <- oldSrv.ServeNotifyListener(c.listener) }()
	c.begin()
	if !c.lines.Scan() || c.lines.Text() != "made" {
		t.Fatalf("before the hand-over: %q", c.lines.Text())
	}
	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	<-served
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	fmt.Fprintln(c.in)
	var got []string
	for c.lines.Scan() {
		got = append(got, c.lines.Text())
	}
	if want := "w1 ring link k"; strings.Join(got, "\n") != want {
		t.Fatalf("after the hand-over: %q, want %q", got, want)
	}
	c.in.Close()
	c.cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	<-newServed
	<-oldServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}
