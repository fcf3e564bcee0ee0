package server_test

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func init() { testChildren["fsuid"] = fsuidChild }

// fsuidChild, as root, sets its thread's filesystem ids apart from its
// effective ones (setfsuid 1003, setfsgid 1004: the kernel applies both
// to the calling thread alone), adds a key to its session and says who
// owns it.
func fsuidChild() {
	runtime.LockOSThread()
	startIntercepted(false)
	unix.Syscall(unix.SYS_SETFSUID, 1003, 0, 0)
	unix.Syscall(unix.SYS_SETFSGID, 1004, 0, 0)
	id, s := addKey("user", "fsuid", "v", -3)
	if id < 0 {
		fmt.Println("add:", s)
		return
	}
	buf := make([]byte, 256)
	n, s := keyctl(unix.KEYCTL_DESCRIBE, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if n < 0 {
		fmt.Println("describe:", s)
		return
	}
	f := bytes.Split(bytes.TrimRight(buf[:n], "\x00"), []byte(";"))
	fmt.Printf("owner %s, group %s\n", f[1], f[2])
}

// addKey makes one raw add_key call.
func addKey(typ, desc, payload string, ring int32) (int32, string) {
	p := []byte(payload)
	r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr(typ), cstr(desc), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(uint32(ring)), 0)
	if e != 0 {
		return -1, e.Error()
	}
	return int32(r), "ok"
}

// The kernel judges a key call by the caller's filesystem ids, and
// makes them a new key's owner: a thread of euid 0 that has set its
// fsuid to 1003 adds a key owned by 1003, not root (who could then
// neither read nor update it as its owner), and is refused what 1003
// would be. An intercepted call was judged by the effective ids.
func TestInterceptedCallsAreJudgedByFilesystemIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setfsuid to another uid needs root")
	}
	want := "owner 1003, group 1004\n"
	if k, ok := runKernel(t, "fsuid"); ok && k != want {
		t.Fatalf("the kernel: %q, want %q", k, want)
	}
	if said := runIntercepted(t, "fsuid"); said != want {
		t.Fatalf("ukeys: %q, want %q (the kernel's)", said, want)
	}
}
