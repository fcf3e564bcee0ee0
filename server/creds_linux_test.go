package server_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	testChildren["setuid"] = setuidChild
	testChildren["exec"] = execChild
	testChildren["exec2"] = execChild
}

// keyctl makes one raw keyctl call and renders its result: the value, or
// the errno's text.
func keyctl(cmd int, args ...uintptr) (int32, string) {
	var a [4]uintptr
	copy(a[:], args)
	r, _, e := unix.Syscall6(unix.SYS_KEYCTL, uintptr(cmd), a[0], a[1], a[2], a[3], 0)
	if e != 0 {
		return -1, e.Error()
	}
	return int32(r), "ok"
}

func cstr(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }

// setuidChild, as root, makes a key only its owner's uid may use, then
// drops to uid 1000 on its thread (setresuid, which the kernel applies to
// the calling thread alone) and tries it again: the answers must follow
// the thread's credentials of the moment, not those it had when first
// met.
func setuidChild() {
	runtime.LockOSThread()
	startIntercepted(true)
	payload := []byte("secret")
	r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr("setuid-test"), uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xfffffffd), 0)
	if e != 0 {
		fmt.Println("add_key:", e)
		return
	}
	k := uintptr(r)
	_, s := keyctl(unix.KEYCTL_SETPERM, k, 0x003f0000) // the owner's uid alone, not its possessors
	fmt.Println("setperm:", s)
	buf := make([]byte, 64)
	_, s = keyctl(unix.KEYCTL_READ, k, uintptr(unsafe.Pointer(&buf[0])), 64)
	fmt.Println("read as root:", s)
	tk, _ := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xffffffff), 1)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 1000, 1000, 1000); e != 0 {
		fmt.Println("setresuid:", e)
		return
	}
	_, s = keyctl(unix.KEYCTL_READ, k, uintptr(unsafe.Pointer(&buf[0])), 64)
	fmt.Println("read as 1000:", s)
	_, s = keyctl(unix.KEYCTL_CHOWN, k, 1000, ^uintptr(0))
	fmt.Println("chown as 1000:", s)
	// "type;uid;gid;perm;description": the owner is the second field.
	owner := func(id uintptr) string {
		n, s := keyctl(unix.KEYCTL_DESCRIBE, id, uintptr(unsafe.Pointer(&buf[0])), 64)
		if n <= 0 {
			return s
		}
		return strings.Split(string(buf[:n]), ";")[1]
	}
	fmt.Println("@t owner after setuid:", owner(uintptr(tk)))
	r, _, e = unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr("setuid-test-2"), uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xfffffffd), 0)
	if e != 0 {
		fmt.Println("add_key as 1000:", e)
		return
	}
	fmt.Println("new key's owner:", owner(r))
}

// A thread that changes its credentials (setresuid) is checked with the
// new ones from its next call on, as the kernel checks current_cred():
// a process that drops root cannot go on using root's keys.
func TestInterceptedSetuid(t *testing.T) {
	ukeystest.NeedRoot(t, "a thread changes its uid")
	want := "setperm: ok\nread as root: ok\nread as 1000: permission denied\nchown as 1000: permission denied\n" +
		"@t owner after setuid: 1000\nnew key's owner: 1000\n"
	if said := runIntercepted(t, "setuid"); said != want {
		t.Fatalf("ukeys:\n%s\nwant:\n%s", said, want)
	}
	if k, ok := runKernel(t, "setuid"); ok && k != want {
		t.Fatalf("the kernel:\n%s\nwant:\n%s", k, want)
	}
}

// execChild makes a process keyring and a thread keyring, then execs
// itself (role exec2), which asks for them again without making them and
// for its session: execve drops the first two and keeps the third.
func execChild() {
	runtime.LockOSThread()
	if os.Getenv("UKEYS_TEST_CHILD") == "exec" {
		startIntercepted(false)
		p, s := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffe), 1)
		fmt.Println("@p before exec:", s)
		_, s = keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xffffffff), 1)
		fmt.Println("@t before exec:", s)
		ses, _ := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0)
		// Link @p into the session to see after exec that it lives on
		// there while no longer the process's.
		keyctl(unix.KEYCTL_LINK, uintptr(p), uintptr(0xfffffffd))
		env := slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "UKEYS_TEST_CHILD=") })
		env = append(env, "UKEYS_TEST_CHILD=exec2", fmt.Sprintf("UKEYS_TEST_SESSION=%d", ses), fmt.Sprintf("UKEYS_TEST_P=%d", p))
		err := syscall.Exec(os.Args[0], []string{os.Args[0], "-test.run=^$"}, env)
		fmt.Println("exec:", err)
		return
	}
	_, s := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffe), 0)
	fmt.Println("@p after exec:", s)
	_, s = keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xffffffff), 0)
	fmt.Println("@t after exec:", s)
	ses, _ := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0)
	fmt.Println("same session:", fmt.Sprint(ses) == os.Getenv("UKEYS_TEST_SESSION"))
	p, _ := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffe), 1)
	fmt.Println("a new @p:", fmt.Sprint(p) != os.Getenv("UKEYS_TEST_P"))
}

// A program that execs another loses its thread and process keyrings and
// keeps its session, as with the kernel's execve.
func TestInterceptedExec(t *testing.T) {
	want := "@p before exec: ok\n@t before exec: ok\n@p after exec: required key not available\n" +
		"@t after exec: required key not available\nsame session: true\na new @p: true\n"
	if said := runIntercepted(t, "exec"); said != want {
		t.Fatalf("ukeys:\n%s\nwant:\n%s", said, want)
	}
	if k, ok := runKernel(t, "exec"); ok && k != want {
		t.Fatalf("the kernel:\n%s\nwant:\n%s", k, want)
	}
}
