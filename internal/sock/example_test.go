package sock_test

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/wire"
)

// A client's round trip: the request is built in place, written inside
// the raw read, and the answer read once it is there; every buffer is
// wiped as it is done with.
func Example() {
	fds, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	unix.SetNonblock(fds[0], true)
	unix.SetNonblock(fds[1], true)
	client, daemon := os.NewFile(uintptr(fds[0]), "client"), os.NewFile(uintptr(fds[1]), "daemon")
	defer client.Close()
	defer daemon.Close()

	go func() { // a daemon that answers one request
		d, _ := sock.New(daemon, 256)
		body, _ := d.In.Next()
		req, _ := wire.DecodeRequest(body)
		d.Out.Response(&wire.Response{Tag: req.Tag, Ints: []int64{req.Ints[0] * 2}})
		d.In.Done()
		d.Flush()
	}()

	c, _ := sock.New(client, 256)
	c.Out.Request(&wire.Request{Tag: 1, Op: wire.OpGetKeyringID, Ints: []int64{21, 0}})
	if _, _, err := c.FlushAndWait(nil); err != nil {
		fmt.Println(err)
		return
	}
	body, _ := c.In.Next()
	resp, _ := wire.DecodeResponse(body)
	fmt.Println(resp.Tag, resp.Ints[0])
	c.In.Done()
	// Output: 1 42
}
