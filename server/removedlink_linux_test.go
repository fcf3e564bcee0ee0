package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/tuning"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func init() { testChildren["removedlink"] = removedLinkChild }

// removedLinkChild makes a key lose its last link in four ways and, at
// once, asks about it by serial; it says what each call answered.
func removedLinkChild() {
	startIntercepted(false)
	const session = uintptr(0xfffffffd) // @s
	add := func(typ, desc string, ring uintptr) uintptr {
		p := []byte("payload")
		var pp, n uintptr
		if typ != "keyring" {
			pp, n = uintptr(unsafe.Pointer(&p[0])), uintptr(len(p))
		}
		r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr(typ), cstr(desc), pp, n, ring, 0)
		if e != 0 {
			fmt.Println("add_key:", e)
			return 0
		}
		return uintptr(int32(r))
	}
	buf := make([]byte, 256)
	b := uintptr(unsafe.Pointer(&buf[0]))
	for _, sc := range []string{"unlink", "clear", "ring-unlinked", "invalidate"} {
		ring := add("keyring", "r-"+sc, session)
		id := add("user", "a", ring)
		switch sc {
		case "unlink":
			keyctl(unix.KEYCTL_UNLINK, id, ring)
		case "clear":
			keyctl(unix.KEYCTL_CLEAR, ring)
		case "ring-unlinked":
			keyctl(unix.KEYCTL_UNLINK, ring, session)
		case "invalidate":
			keyctl(unix.KEYCTL_INVALIDATE, id)
		}
		var said []string
		for _, op := range []struct {
			name string
			cmd  int
			args []uintptr
		}{
			{"describe", unix.KEYCTL_DESCRIBE, []uintptr{id, b, uintptr(len(buf))}},
			{"read", unix.KEYCTL_READ, []uintptr{id, b, uintptr(len(buf))}},
			{"setperm", unix.KEYCTL_SETPERM, []uintptr{id, 0x3f3f0000}},
			{"search", unix.KEYCTL_SEARCH, []uintptr{ring, cstr("user"), cstr("a"), 0}},
		} {
			if sc == "invalidate" && (op.name == "read" || op.name == "search") {
				// The kernel's answers race its collector: a read is
				// ENOKEY while the link is there, EACCES once its pass
				// removed it; a search EKEYREVOKED, then ENOKEY.
				continue
			}
			_, s := keyctl(op.cmd, op.args...)
			said = append(said, op.name+"="+s)
		}
		fmt.Printf("%s: %s\n", sc, strings.Join(said, " "))
		keyctl(unix.KEYCTL_UNLINK, ring, session)
	}
}

// A key whose last link was just removed is still found by serial in the
// kernel, possessed by no one, until its collector drops the removed
// link's reference (an RCU callback, ~17 ms later on kernel 6.18); an
// invalidated key is ENOKEY at once. ukeys answered ENOKEY at once for
// all. The daemon's collector is held (an hour's release delay) so that
// ukeys' answers are certain; the kernel's window is long beside the
// microseconds between the child's calls, and a kernel run that missed
// it (a child descheduled for longer) is tried again.
func TestRemovedLinkFoundUntilCollected(t *testing.T) {
	const win = "describe=ok read=permission denied setperm=permission denied search=required key not available"
	want := "unlink: " + win + "\n" +
		"clear: " + win + "\n" +
		// The keyring itself is in its window, unsearchable by a
		// non-possessor.
		"ring-unlinked: describe=ok read=permission denied setperm=permission denied search=permission denied\n" +
		"invalidate: describe=required key not available setperm=required key not available\n"
	for try := 0; ; try++ {
		k, ok := runKernel(t, "removedlink")
		if !ok || k == want {
			break
		}
		if try == 4 {
			t.Fatalf("the kernel: %q, want %q", k, want)
		}
	}
	svc := keys.New(keys.WithGCTuning(tuning.GC{ReleaseDelay: time.Hour, ReleaseDelaySet: true}))
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	defer srv.Shutdown(t.Context())
	if said := runInterceptedOn(t, srv, "removedlink"); said != want {
		t.Fatalf("ukeys: %q, want %q (the kernel's)", said, want)
	}
}
