package intercept_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

const childEnv = "INTERCEPT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "handoff" {
		os.Exit(handOffChild()) // its goroutine not locked to its thread
	}
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	if v := os.Getenv(benchEnv); v != "" {
		n, mode, _ := strings.Cut(v, ":")
		count, _ := strconv.Atoi(n)
		os.Exit(benchChild(count, mode == "kernel"))
	}
	goleak.VerifyTestMain(m)
}

// child installs the filter on its locked thread, hands the listener to
// its parent over fd 3, waits for the word, and then makes raw key
// system calls from that thread, printing one line per call.
func child() int {
	runtime.LockOSThread()
	if os.Getenv(childEnv) == "kernel" {
		// The same calls to the kernel's own keyrings, in a session of
		// their own.
		if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
			fmt.Println("kernel keyrings:", e)
			return 0
		}
	} else {
		fd, err := intercept.Install()
		if err != nil {
			fmt.Println("install:", err)
			return 1
		}
		if err := intercept.SendListener(3, fd); err != nil {
			fmt.Println("send:", err)
			return 1
		}
		unix.Close(fd)
		var go_ [1]byte
		if _, err := unix.Read(3, go_[:]); err != nil {
			fmt.Println("wait:", err)
			return 1
		}
	}
	cstr := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	if os.Getenv(childEnv) == "iov" {
		// KEYCTL_INSTANTIATE_IOV of key 42 into ring -3, in three pieces.
		parts := [][]byte{[]byte("ab"), nil, []byte("cde")}
		iov := make([]unix.Iovec, len(parts))
		for i, p := range parts {
			if len(p) > 0 {
				iov[i].Base = &p[0]
			}
			iov[i].SetLen(len(p))
		}
		_, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE_IOV, 42, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)), uintptr(0xfffffffd), 0)
		fmt.Println("instantiate_iov:", e)
		return 0
	}
	if os.Getenv(childEnv) == "instantiate-fault" {
		// Instantiations whose payload is unmapped, of the key the
		// handler says the caller has authority for (42), and of another.
		page, _ := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		gone := uintptr(unsafe.Pointer(&page[0]))
		unix.Munmap(page)
		for _, id := range []uintptr{42, 43} {
			_, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE, id, gone, 3, 0, 0)
			fmt.Printf("instantiate %d: %v\n", id, e)
		}
		// A null payload is none, whatever its length says.
		_, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE, 42, 0, 5<<20, 0, 0)
		fmt.Printf("instantiate with a null payload: %v\n", e)
		return 0
	}
	if os.Getenv(childEnv) == "once" {
		// One call, which the test kills the caller in the middle of.
		unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr("killed"), 0, 0, uintptr(0xfffffffd), 0)
		fmt.Println("the call returned")
		return 0
	}
	call := func(name string, nr uintptr, a ...uintptr) int64 {
		var args [5]uintptr
		copy(args[:], a)
		r, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], 0)
		if e != 0 {
			fmt.Printf("%s: %v\n", name, e)
			return -1
		}
		fmt.Printf("%s: %d\n", name, int64(int32(r)))
		return int64(r)
	}
	payload := []byte("payload")
	id := uintptr(call("add_key", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-test-k"), uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xfffffffd)))
	buf := make([]byte, 64)
	if n := call("read", unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), 64); n > 0 {
		fmt.Printf("read payload: %q\n", buf[:n])
	}
	small := make([]byte, 3)
	call("read into 3 bytes", unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&small[0])), 3)
	fmt.Printf("read into 3 bytes: %q\n", small)
	clear(buf)
	if n := call("describe", unix.SYS_KEYCTL, unix.KEYCTL_DESCRIBE, id, uintptr(unsafe.Pointer(&buf[0])), 64); n > 0 {
		fmt.Printf("describe text: %q\n", buf[:n])
	}
	tiny := make([]byte, 4)
	call("describe into 4 bytes", unix.SYS_KEYCTL, unix.KEYCTL_DESCRIBE, id, uintptr(unsafe.Pointer(&tiny[0])), 4)
	fmt.Printf("describe into 4 bytes: %q\n", tiny)
	if s := call("search", unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, uintptr(0xfffffffd), cstr("user"), cstr("intercept-test-k"), 0); s >= 0 && uintptr(s) != id {
		fmt.Println("search found another key")
	}
	call("search missing", unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, uintptr(0xfffffffd), cstr("user"), cstr("no-such-key"), 0)
	call("add_key with a bad type pointer", unix.SYS_ADD_KEY, 1, cstr("x"), 0, 0, uintptr(0xfffffffd))
	call("add_key with a type too long", unix.SYS_ADD_KEY, cstr(strings.Repeat("t", 40)), cstr("x"), 0, 0, uintptr(0xfffffffd))
	call("an unknown command", unix.SYS_KEYCTL, 999, 0, 0, 0, 0)
	// Memory the caller has unmapped: nothing is read from it or written
	// to it, and a key whose payload lies there is not made.
	if page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON); err == nil {
		gone := uintptr(unsafe.Pointer(&page[0]))
		unix.Munmap(page)
		call("read into unmapped memory", unix.SYS_KEYCTL, unix.KEYCTL_READ, id, gone, 64)
		call("describe into unmapped memory", unix.SYS_KEYCTL, unix.KEYCTL_DESCRIBE, id, gone, 64)
		call("add_key with an unmapped payload", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-unmapped"), gone, 7, uintptr(0xfffffffd))
		call("search for it", unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, uintptr(0xfffffffd), cstr("user"), cstr("intercept-unmapped"), 0)
	}
	// add_key's strings and payload are read ahead in one go (prefetch);
	// where any of it faults, the error is the kernel's, in its order.
	made := func(name string, nr uintptr, a ...uintptr) {
		var args [5]uintptr
		copy(args[:], a)
		if _, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], 0); e != 0 {
			fmt.Printf("%s: %v\n", name, e)
			return
		}
		fmt.Printf("%s: made\n", name)
	}
	if pages, err := unix.Mmap(-1, 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON); err == nil {
		// Two pages to use, one the caller may not read, one unmapped.
		unix.Mprotect(pages[2*4096:3*4096], unix.PROT_NONE)
		unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&pages[3*4096])), 4096, 0)
		at := func(i int) uintptr { return uintptr(unsafe.Pointer(&pages[0])) + uintptr(i) }
		copy(pages[4096-3:], "across-a-page\x00")
		copy(pages[2*4096-3:], "abc") // and no NUL before the page it may not read
		p := uintptr(unsafe.Pointer(&payload[0]))
		made("add_key with a description across a page", unix.SYS_ADD_KEY, cstr("user"), at(4096-3), p, uintptr(len(payload)), uintptr(0xfffffffd))
		made("add_key with a description running into memory it may not read", unix.SYS_ADD_KEY, cstr("user"), at(2*4096-3), p, uintptr(len(payload)), uintptr(0xfffffffd))
		made("add_key with an unmapped description", unix.SYS_ADD_KEY, cstr("user"), at(3*4096), p, uintptr(len(payload)), uintptr(0xfffffffd))
		made("add_key with a payload it may not read", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-none"), at(2*4096), 7, uintptr(0xfffffffd))
		made("add_key with a payload across into memory it may not read", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-none"), at(2*4096-4), 7, uintptr(0xfffffffd))
		made("add_key of 40000 bytes with an unmapped description", unix.SYS_ADD_KEY, cstr("user"), at(3*4096), at(0), 40000, uintptr(0xfffffffd))
		made("add_key of 40000 bytes with an unmapped type", unix.SYS_ADD_KEY, at(3*4096), cstr("intercept-big"), at(0), 40000, uintptr(0xfffffffd))
		made("add_key of 40000 bytes across memory it may not read", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-big"), at(0), 40000, uintptr(0xfffffffd))
		made("add_key of 2 MiB with an unmapped description", unix.SYS_ADD_KEY, cstr("user"), at(3*4096), at(0), 2<<20, uintptr(0xfffffffd))
		made("search across a page", unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, uintptr(0xfffffffd), cstr("user"), at(4096-3), 0)
	}
	// KEYCTL_INSTANTIATE_IOV's segment lengths are the caller's: lengths
	// that would wrap around when added (which once had the listener
	// allocate from a negative length and panic, taking the daemon with
	// it), one that runs past user space, totals over the bound, too many
	// segments. This process holds
	// no authority to instantiate, so a well-formed call is refused for
	// that, after the kernel has checked the segments.
	iov := func(name string, lens ...uint64) {
		vec := make([]unix.Iovec, len(lens))
		for i, n := range lens {
			vec[i].Base, vec[i].Len = &payload[0], n
		}
		call(name, unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE_IOV, 42, uintptr(unsafe.Pointer(&vec[0])), uintptr(len(vec)), uintptr(0xfffffffd))
	}
	iov("instantiate_iov with lengths that wrap around", 1<<63, 1<<63+3)
	iov("instantiate_iov with lengths that wrap around in many steps", slices.Repeat([]uint64{1 << 55}, 512)...)
	iov("instantiate_iov with a lone length past user space", 1<<47) // cut to MAX_RW_COUNT first
	iov("instantiate_iov with a length past user space", 3, 1<<47)
	iov("instantiate_iov of a gigabyte", 1<<30)
	iov("instantiate_iov of two halves of a megabyte", 1<<19, 1<<19)
	iov("instantiate_iov of 1025 segments", make([]uint64, 1025)...)
	iov("instantiate_iov without authority", 3, 0, 4)
	// A payload the caller cannot give: the kernel copies it only after
	// it has found the caller's authority, so without one the answer is
	// EPERM, not EFAULT.
	if page, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON); err == nil {
		gone := uintptr(unsafe.Pointer(&page[0]))
		unix.Munmap(page)
		call("instantiate with an unmapped payload", unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE, 42, gone, 3, uintptr(0xfffffffd))
		vec := []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&payload[0])), Len: 2}, {Len: 3}}
		*(*uintptr)(unsafe.Pointer(&vec[1].Base)) = gone
		call("instantiate_iov with an unmapped segment", unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE_IOV, 42, uintptr(unsafe.Pointer(&vec[0])), 2, uintptr(0xfffffffd))
	}
	// Payloads larger than a user key's, which the daemon asks about
	// before it reads them: refused by their length, by their keyring,
	// or for memory of which only the start is the caller's.
	big := make([]byte, 40000)
	call("add_key of 40000 bytes", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-big"), uintptr(unsafe.Pointer(&big[0])), 40000, uintptr(0xfffffffd))
	call("add_key of 40000 bytes to no keyring", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-big"), uintptr(unsafe.Pointer(&big[0])), 40000, 12345)
	if pages, err := unix.Mmap(-1, 0, 40960, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON); err == nil {
		// The last page only (unix.Munmap takes whole mappings).
		unix.Syscall(unix.SYS_MUNMAP, uintptr(unsafe.Pointer(&pages[36864])), 4096, 0)
		call("add_key of 40000 bytes, the last page unmapped", unix.SYS_ADD_KEY, cstr("user"), cstr("intercept-big"), uintptr(unsafe.Pointer(&pages[0])), 40000, uintptr(0xfffffffd))
	}
	bigKey := bytes.Repeat([]byte("b"), 100000)
	if id := call("big_key add", unix.SYS_ADD_KEY, cstr("big_key"), cstr("intercept-bigkey"), uintptr(unsafe.Pointer(&bigKey[0])), uintptr(len(bigKey)), uintptr(0xfffffffd)); id > 0 {
		back := make([]byte, len(bigKey))
		if n := call("big_key read", unix.SYS_KEYCTL, unix.KEYCTL_READ, uintptr(id), uintptr(unsafe.Pointer(&back[0])), uintptr(len(back))); n > 0 {
			fmt.Printf("big_key read back: %v\n", bytes.Equal(back, bigKey))
		}
	}
	// Diffie-Hellman: 2^3 mod 23, the prime padded to 1536 bits, read
	// through struct keyctl_dh_params (this kernel may lack it: the
	// comparison leaves it out).
	prime := make([]byte, 192)
	prime[191] = 23
	three, two := []byte{3}, []byte{2}
	ring := uintptr(0xfffffffd)
	var params [3]int32
	for i, p := range [][]byte{three, prime, two} {
		n, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(fmt.Sprintf("dh%d", i)), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), ring, 0)
		if e != 0 {
			fmt.Println("dh add:", e)
		}
		params[i] = int32(n)
	}
	dh := make([]byte, 256)
	if n := call("dh", unix.SYS_KEYCTL, unix.KEYCTL_DH_COMPUTE, uintptr(unsafe.Pointer(&params[0])), uintptr(unsafe.Pointer(&dh[0])), 256, 0); n > 0 {
		fmt.Printf("dh last byte: %d\n", dh[n-1])
	}
	call("revoke", unix.SYS_KEYCTL, unix.KEYCTL_REVOKE, id)
	call("read revoked", unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), 64)
	return 0
}

// A program under the filter makes its key calls as it would to the
// kernel, and gets the kernel's answers from a keys.Service; the
// kernel's own keyrings see none of it.
func TestInterceptedCalls(t *testing.T) {
	cmd, ours, fd, out := startChild(t, "1")
	rights := []int{fd}

	svc := keys.New()
	defer svc.Close()
	var mu sync.Mutex
	locals := map[int]*server.Local{}
	l, err := intercept.NewListener(rights[0], intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		mu.Lock()
		defer mu.Unlock()
		lc := locals[c.Pid]
		if lc == nil {
			lc = server.NewLocal(svc, keys.Cred{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: c.Pid})
			locals[c.Pid] = lc
			lc.Do(&wire.Request{Op: wire.OpJoinSession})
		}
		return lc.Do(r)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := serveChild(t, l, cmd, ours, out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	l.Close()
	for _, lc := range locals {
		lc.Close()
	}

	said := out.String()
	got := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		got[k] = v
	}
	for k, want := range map[string]string{
		"read":                                           "7",
		"read payload":                                   `"payload"`,
		"read into 3 bytes":                              `"\x00\x00\x00"`, // all or nothing, as keyctl_read_key copies
		"describe":                                       "35",             // "user;0;0;3f010000;intercept-test-k" and its NUL
		"describe into 4 bytes":                          `"\x00\x00\x00\x00"`,
		"search missing":                                 "required key not available",
		"add_key with a bad type pointer":                "bad address",
		"add_key with a type too long":                   "invalid argument",
		"an unknown command":                             "operation not supported",
		"read into unmapped memory":                      "bad address",
		"describe into unmapped memory":                  "bad address",
		"add_key with an unmapped payload":               "bad address",
		"search for it":                                  "required key not available",
		"add_key of 40000 bytes":                         "invalid argument",
		"add_key of 40000 bytes to no keyring":           "required key not available",
		"add_key of 40000 bytes, the last page unmapped": "bad address",
		"big_key read":                                   "100000",
		"big_key read back":                              "true",
		"revoke":                                         "0",
		"dh":                                             "8", // the significant bytes, in whole 64-bit limbs, as the kernel pads them
		"dh last byte":                                   "8",
		"read revoked":                                   "key has been revoked",
		"add_key with a description across a page":       "made",
		"add_key with a description running into memory it may not read": "bad address",
		"add_key with an unmapped description":                           "bad address",
		"add_key with a payload it may not read":                         "bad address",
		"add_key with a payload across into memory it may not read":      "bad address",
		"add_key of 40000 bytes with an unmapped description":            "bad address",
		"add_key of 40000 bytes with an unmapped type":                   "bad address",
		"add_key of 40000 bytes across memory it may not read":           "bad address",
		"add_key of 2 MiB with an unmapped description":                  "invalid argument", // its length is checked first
		"search across a page":                                           "made",
		"instantiate_iov with lengths that wrap around":                  "invalid argument", // negative as a ssize_t
		"instantiate_iov with lengths that wrap around in many steps":    "bad address",
		"instantiate_iov with a lone length past user space":             "invalid argument",
		"instantiate_iov with a length past user space":                  "bad address",
		"instantiate_iov of a gigabyte":                                  "invalid argument",
		"instantiate_iov of two halves of a megabyte":                    "invalid argument",
		"instantiate_iov of 1025 segments":                               "invalid argument",
		"instantiate_iov without authority":                              "operation not permitted",
		"instantiate with an unmapped payload":                           "operation not permitted",
		"instantiate_iov with an unmapped segment":                       "operation not permitted",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q", k, got[k], want)
		}
	}
	if !strings.HasPrefix(got["describe text"], `"user;`) || !strings.HasSuffix(got["describe text"], `;intercept-test-k\x00"`) {
		t.Errorf("describe text: %s", got["describe text"])
	}
	if t.Failed() {
		t.Logf("the child said:\n%s", said)
	}
	// The kernel's own keyrings gained nothing from the intercepted run
	// (before the kernel run below adds its own).
	if pk, err := os.ReadFile("/proc/keys"); err == nil && bytes.Contains(pk, []byte("intercept-test-k")) {
		t.Errorf("the kernel holds the key:\n%s", pk)
	}
	// The kernel answers the same, but for the serials it gives.
	kc := exec.Command(os.Args[0], "-test.run=^$")
	kc.Env = append(os.Environ(), childEnv+"=kernel")
	kout, err := kc.CombinedOutput()
	if err != nil {
		t.Fatalf("kernel child: %v\n%s", err, kout)
	}
	// The kernel child's session went with it, but the kernel's
	// collector drops its keys a moment later: wait for that, so that a
	// run of this test that follows (-count) finds none of them.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if pk, err := os.ReadFile("/proc/keys"); err != nil || !bytes.Contains(pk, []byte("intercept-test-k")) {
			break
		}
	}
	if bytes.HasPrefix(kout, []byte("kernel keyrings:")) {
		t.Logf("no comparison with the kernel: %s", kout)
	} else {
		kernel := map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(kout))
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			kernel[k] = v
		}
		for k, v := range kernel {
			if k == "add_key" || k == "search" || strings.HasPrefix(k, "dh") || strings.HasPrefix(k, "big_key") {
				continue // serials; Diffie-Hellman and big_key, which a kernel may lack
			}
			if got[k] != v {
				t.Errorf("%s: ukeys %q, kernel %q", k, got[k], v)
			}
		}
		if len(kernel) != len(got) && !strings.Contains(string(kout), "dh: ") && !strings.Contains(string(kout), "big_key add: ") {
			t.Errorf("the kernel run said %d things, ukeys %d:\n%s\n%s", len(kernel), len(got), kout, said)
		}
	}
}

// serveChild serves l while the child cmd, told to go on over ours, runs
// to its end (the test fails if it fails, with what it said in out), and
// returns what Serve returned.
func serveChild(t *testing.T, l *intercept.Listener, cmd *exec.Cmd, ours *os.File, out fmt.Stringer) error {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	ours.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	return <-served
}

// startChild runs the test binary in child mode under the filter and
// returns it with the listener it handed over.
func startChild(t *testing.T, mode string) (*exec.Cmd, *os.File, int, *bytes.Buffer) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	t.Cleanup(func() { ours.Close() })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.ExtraFiles = []*os.File{theirs}
	out := new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	theirs.Close()
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		cmd.Wait()
		if strings.HasPrefix(out.String(), "install:") {
			t.Skipf("the kernel does not let this process filter its key calls: %s", out.String())
		}
		t.Fatalf("no listener: %v\n%s", err, out.String())
	}
	return cmd, ours, listener, out
}

// A caller killed in the middle of a call: the answer has nobody to go
// to, the listener goes on, and once its last caller is gone it ends.
func TestCallerKilledMidCall(t *testing.T) {
	cmd, ours, fd, _ := startChild(t, "once")
	inCall, release := make(chan struct{}), make(chan struct{})
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		close(inCall)
		<-release
		return &wire.Response{Ints: []int64{42}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	ours.Write([]byte{1})
	<-inCall
	cmd.Process.Kill()
	cmd.Wait()
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the listener did not end with its last caller")
	}
	l.Close()
}

// Close ends Serve even while callers remain, and their pending calls
// fail (the kernel answers ENOSYS when the listener goes).
func TestCloseEndsServe(t *testing.T) {
	cmd, ours, fd, out := startChild(t, "once")
	inCall := make(chan struct{})
	var once sync.Once
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		once.Do(func() { close(inCall) })
		return &wire.Response{Errno: uint16(keys.EAGAIN)}
	}))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	served := make(chan error, 1)
	go func() { served <- l.Serve() }()
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve on a closed listener returned nil")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not end on a closed listener")
	}
	ours.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "the call returned") {
		t.Fatalf("the caller's call did not return: %s", out.String())
	}
}

// KEYCTL_INSTANTIATE_IOV reaches the handler as KEYCTL_INSTANTIATE, its
// payload gathered from the caller's iovec.
func TestInstantiateIOV(t *testing.T) {
	cmd, ours, fd, out := startChild(t, "iov")
	var got *wire.Request
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		got = &wire.Request{Op: r.Op, Ints: slices.Clone(r.Ints), Bufs: [][]byte{bytes.Clone(r.Bufs[0])}}
		return &wire.Response{}
	}))
	if err != nil {
		t.Fatal(err)
	}
	serveChild(t, l, cmd, ours, out)
	if got == nil || got.Op != wire.OpInstantiate || !slices.Equal(got.Ints, []int64{42, -3}) || string(got.Bufs[0]) != "abcde" {
		t.Fatalf("the handler got %+v (%q)", got, out.String())
	}
	if !strings.Contains(out.String(), "instantiate_iov: errno 0") {
		t.Fatalf("the caller: %s", out.String())
	}
}

// An instantiation whose payload the caller cannot give fails as the
// kernel's does: EFAULT only for the key whose authority the caller has
// assumed (the kernel looks for it before it copies the payload), EPERM
// for any other. The handler here plays the daemon: it says the caller
// holds the authority for key 42. A null payload is no payload, whatever
// its length, as the kernel takes it.
func TestInstantiateFaultAfterAuthority(t *testing.T) {
	cmd, ours, fd, out := startChild(t, "instantiate-fault")
	var asked []wire.Op
	l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		asked = append(asked, r.Op)
		switch r.Op {
		case wire.OpInstantiate:
			if len(r.Bufs) > 0 && len(r.Bufs[0]) > 0 {
				return &wire.Response{Errno: uint16(keys.EINVAL)}
			}
			return &wire.Response{}
		case wire.OpGetKeyringID:
			return &wire.Response{Ints: []int64{777}}
		case wire.OpDescribe:
			return &wire.Response{Bufs: [][]byte{[]byte(".request_key_auth;0;0;3f010000;2a")}}
		}
		return &wire.Response{Errno: uint16(keys.EINVAL)}
	}))
	if err != nil {
		t.Fatal(err)
	}
	serveChild(t, l, cmd, ours, out)
	if want := "instantiate 42: bad address\ninstantiate 43: operation not permitted\ninstantiate with a null payload: errno 0\n"; out.String() != want {
		t.Fatalf("the caller said:\n%s\nwant:\n%s", out.String(), want)
	}
	n := 0
	for _, op := range asked {
		if op == wire.OpInstantiate {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d instantiations reached the handler, want the one with a null payload", n)
	}
}
