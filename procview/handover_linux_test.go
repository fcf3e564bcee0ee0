package procview

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A hand-over passes the mounted files' connection to a new Server: a
// reader that opens them in a loop meanwhile never fails (its requests
// wait in the kernel's queue while neither reads), a file opened before
// reads on what it read, every open after reads the new Server's view,
// and the mount is the old one's, unmounted only by the new one's Close.
// A failed hand-over leaves the old Server serving.
func TestHandOverKeepsTheConnection(t *testing.T) {
	old, nu := store(t, "key-of-the-old", 1), store(t, "key-of-the-new", 2)
	none := func(int) (Namespace, bool) { return Namespace{}, false }
	dir, first := mount(t, Config{Lookup: none, Host: &old})
	keys := filepath.Join(dir, "keys")
	read := func() (string, error) {
		b, err := os.ReadFile(keys)
		return string(b), err
	}
	var mi unix.Stat_t
	unix.Stat(dir, &mi)

	// A failed hand-over: the old one serves on.
	fd, done, err := first.HandOver(io.Discard)
	if err != nil || fd < 0 {
		t.Fatal(fd, err)
	}
	done(false)
	if got, err := read(); err != nil || !strings.Contains(got, "key-of-the-old") {
		t.Fatalf("after a failed hand-over: %v %q", err, got)
	}

	f, err := os.Open(keys)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 5)
	if _, err := io.ReadFull(f, head); err != nil {
		t.Fatal(err)
	}

	var reads, fails atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := read(); err != nil {
				fails.Add(1)
				lastErr.Store(err.Error())
			}
			reads.Add(1)
		}
	}()

	var b bytes.Buffer
	fd, done, err = first.HandOver(&b)
	if err != nil {
		t.Fatal(err)
	}
	// As the server's hand-over does: the next daemon gets a copy.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Fatal(err)
	}
	second, start, err := TakeOver(&b, dup)
	if err != nil {
		t.Fatal(err)
	}
	done(true)
	start(&Config{Lookup: none, Host: &nu})
	t.Cleanup(func() { second.Close() })

	rest, err := io.ReadAll(f)
	if err != nil || !strings.Contains(string(head)+string(rest), "key-of-the-old") {
		t.Errorf("a file opened before the hand-over, after: %v %q", err, rest)
	}
	for reads.Load() < 200 {
		if fails.Load() > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if fails.Load() > 0 {
		t.Errorf("%d of %d reads across the hand-over failed, the last: %v", fails.Load(), reads.Load(), lastErr.Load())
	}
	if got, err := read(); err != nil || !strings.Contains(got, "key-of-the-new") {
		t.Errorf("after the hand-over: %v %q", err, got)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Dev != mi.Dev || st.Ino != mi.Ino {
		t.Errorf("the mount changed: %v, device %d inode %d, was %d %d", err, st.Dev, st.Ino, mi.Dev, mi.Ino)
	}
	// The old one's Close leaves the files to the new one.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := read(); err != nil || !strings.Contains(got, "key-of-the-new") {
		t.Errorf("the old one closed: %v %q", err, got)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err == nil {
		t.Errorf("both closed, the files are still there")
	}
	t.Logf("%d reads across the hand-over, %d failed", reads.Load(), fails.Load())
}

// Close while a hand-over is under way (a daemon told to stop while
// another takes over from it) neither unmounts the files nor closes the
// descriptor HandOver returned, which the daemon is sending: the
// hand-over's outcome decides. Handed over, the files are the next
// Server's; not, Close's unmount is done then.
func TestCloseDuringAHandOver(t *testing.T) {
	ns := store(t, "key-of-the-old", 1)
	none := func(int) (Namespace, bool) { return Namespace{}, false }
	for _, handedOver := range []bool{true, false} {
		dir, first := mount(t, Config{Lookup: none, Host: &ns})
		keys := filepath.Join(dir, "keys")
		var b bytes.Buffer
		fd, done, err := first.HandOver(&b)
		if err != nil {
			t.Fatal(err)
		}
		// Close returns at once or once the outcome is known; either
		// way, it has done what it does before the outcome by then.
		closed := make(chan error, 1)
		go func() { closed <- first.Close() }()
		select {
		case err := <-closed:
			closed <- err
		case <-time.After(100 * time.Millisecond):
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			t.Fatalf("handed over %v: the connection's descriptor, after Close: %v", handedOver, err)
		}
		if !handedOver {
			unix.Close(dup)
			done(false)
			if err := <-closed; err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadFile(keys); err == nil {
				t.Errorf("a hand-over failed after Close: the files are still served")
			}
			continue
		}
		second, start, err := TakeOver(&b, dup)
		if err != nil {
			t.Fatal(err)
		}
		done(true)
		start(&Config{Lookup: none, Host: &ns})
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(keys); err != nil || !strings.Contains(string(got), "key-of-the-old") {
			t.Errorf("closed during a hand-over, then handed over: %v %q", err, got)
		}
		if err := second.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
