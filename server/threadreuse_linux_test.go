package server_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/sharedvm"
)

func init() { testChildren["threadreuse"] = threadReuseChild }

// threadReuseChild: a thread A makes its thread keyring with a key in
// it and exits; a new thread B is given A's id (ns_last_pid) and asks
// for its thread keyring, without making one.
func threadReuseChild() {
	startIntercepted(true)
	typ, desc, payload := []byte("user\x00"), []byte("thread A's\x00"), []byte("secret")
	a := []sharedvm.Call{
		{Nr: unix.SYS_KEYCTL, Args: [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, uintptr(0xffffffff), 1}},
		{Nr: unix.SYS_ADD_KEY, Args: [6]uintptr{uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
			uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(0xffffffff)}},
	}
	tidA, err := sharedvm.RunThread(a)
	runtime.KeepAlive(typ)
	runtime.KeepAlive(desc)
	runtime.KeepAlive(payload)
	if err != nil {
		fmt.Println("thread A:", err)
		return
	}
	if int64(a[0].Ret) < 0 || int64(a[1].Ret) < 0 {
		fmt.Println("thread A's calls:", unix.Errno(-int64(a[0].Ret)), unix.Errno(-int64(a[1].Ret)))
		return
	}
	ns, err := os.OpenFile("/proc/sys/kernel/ns_last_pid", os.O_WRONLY, 0)
	if err != nil {
		fmt.Println("ns_last_pid:", err)
		return
	}
	last := []byte(strconv.Itoa(tidA - 1))
	for try := 0; try < 100; try++ {
		// The write, then at once the clone that takes the next id.
		if _, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, ns.Fd(), uintptr(unsafe.Pointer(&last[0])), uintptr(len(last)), 0, 0, 0); e != 0 {
			fmt.Println("ns_last_pid:", e)
			return
		}
		b := []sharedvm.Call{{Nr: unix.SYS_KEYCTL, Args: [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, uintptr(0xffffffff), 0}}}
		tidB, err := sharedvm.RunThread(b)
		if err != nil {
			fmt.Println("thread B:", err)
			return
		}
		if tidB != tidA {
			continue
		}
		if r := int64(b[0].Ret); r < 0 {
			fmt.Println("thread B, given thread A's id, finds its @t:", unix.Errno(-r))
		} else {
			fmt.Println("thread B, given thread A's id, finds its @t: thread A's,", r == int64(a[0].Ret))
		}
		return
	}
	fmt.Println("no thread was given thread A's id")
}

// A thread that exits leaves its id to the next thread made, which must
// not find the thread keyring of the one before: the kernel's new thread
// has none. The daemon kept intercepted threads' callers by thread id,
// and gave the new thread the dead one's @t and its keys.
func TestANewThreadWithADeadThreadsIDHasNoThreadKeyring(t *testing.T) {
	if !sharedvm.Supported {
		t.Skip("no sharedvm on this platform")
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a thread another's id needs root (ns_last_pid)")
	}
	want := "thread B, given thread A's id, finds its @t: required key not available\n"
	if k, ok := runKernel(t, "threadreuse"); ok && k != want && k != "no thread was given thread A's id\n" {
		t.Fatalf("the kernel: %q, want %q", k, want)
	}
	said := runIntercepted(t, "threadreuse")
	if said == "no thread was given thread A's id\n" {
		t.Skip(said)
	}
	if said != want {
		t.Fatalf("ukeys: %q, want %q (the kernel's)", said, want)
	}
}
