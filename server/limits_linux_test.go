package server

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// The kernel's own add_key, given the same bytes, stops at the same NUL:
// side by side, its description of the key is the daemon's.
func TestStringsEndAtNULAsTheKernel(t *testing.T) {
	threadKeyring := int32(unix.KEY_SPEC_THREAD_KEYRING)
	runtime.LockOSThread() // the thread keyring is this thread's
	defer runtime.UnlockOSThread()
	typ := []byte("user\x00junk\x00")
	desc := []byte("name\x00hidden\x00")
	payload := []byte("v")
	id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(int(threadKeyring)), 0)
	if e != 0 {
		t.Skipf("the kernel's add_key is not available here: %v", e)
	}
	defer unix.KeyctlInt(unix.KEYCTL_REVOKE, int(id), 0, 0, 0)
	kernel, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, int(id))
	if err != nil {
		t.Fatal(err)
	}
	_, path := serveTemp(t, Config{})
	c := dialRaw(t, path)
	r := call(t, c, &wire.Request{Tag: 1, Op: wire.OpAddKey, Ints: []int64{int64(keys.UserKeyring)},
		Bufs: [][]byte{typ, desc, payload}})
	if r.Errno != 0 {
		t.Fatalf("add_key: errno %d", r.Errno)
	}
	d := call(t, c, &wire.Request{Tag: 2, Op: wire.OpDescribe, Ints: []int64{r.Ints[0]}})
	// type;uid;gid;perm;description: compare the type and the description.
	kf, df := strings.Split(kernel, ";"), strings.Split(string(d.Bufs[0]), ";")
	if len(kf) != 5 || len(df) != 5 || kf[0] != df[0] || kf[4] != df[4] {
		t.Fatalf("the kernel describes the key as %q, the daemon as %q", kernel, d.Bufs[0])
	}
}
