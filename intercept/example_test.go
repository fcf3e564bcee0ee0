package intercept_test

import (
	"fmt"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// A Handler is what a Listener hands each decoded call to, as net/http
// hands a request to its Handler: this one refuses to add keys and
// answers every other call with the errno the kernel gives for a call it
// does not know. NewListener(fd, h) would serve a filtered program's
// calls through it.
func ExampleHandlerFunc() {
	h := intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
		if r.Op == wire.OpAddKey {
			return &wire.Response{Tag: r.Tag, Errno: uint16(keyctl.EACCES)}
		}
		return &wire.Response{Tag: r.Tag, Errno: uint16(keyctl.EOPNOTSUPP)}
	})
	resp := h.Serve(intercept.Caller{Tid: 42, Pid: 42},
		&wire.Request{Op: wire.OpAddKey, Bufs: [][]byte{[]byte("user"), []byte("name"), []byte("secret")}, Ints: []int64{-3}})
	fmt.Println(keyctl.Errno(resp.Errno))
	// Output: Permission denied
}
