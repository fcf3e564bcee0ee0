package hardening

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// helperArg as this test binary's first argument makes it a request-key
// helper (see helperMain); the daemon appends the kernel's arguments.
const helperArg = "hardening-helper"

// helperCmd is the helper command line for the daemon: mode then args.
func helperCmd(mode string) []string { return []string{binPath, helperArg, mode} }

// helperMain is a request-key helper that behaves as mode says.
// args are the kernel's: create <key> <uid> <gid> <thread> <process> <session>.
func helperMain(mode string, args []string) int {
	if len(args) < 2 {
		return 2
	}
	id, _ := strconv.Atoi(args[1])
	key := keys.Serial(id)
	switch mode {
	case "instantiate": // the well-behaved helper
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return 1
		}
		defer c.Close()
		// As the kernel's request-key does: assume the authority first.
		if _, err := c.AssumeAuthority(key); err != nil {
			return 1
		}
		if err := c.Instantiate(key, []byte("constructed"), 0); err != nil {
			return 1
		}
		return 0
	case "crash":
		panic("helper crashes on purpose")
	case "hang":
		time.Sleep(time.Hour)
		return 0
	case "garbage": // abuses its authority and the protocol, then leaves
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return 1
		}
		defer c.Close()
		c.AssumeAuthority(key + 1)
		c.AssumeAuthority(key)
		c.Instantiate(key+1, []byte("wrong key"), 0)
		c.Instantiate(key, make([]byte, keys.MaxUserPayload+1), 0)
		c.Reject(key+1, 1, keys.EKEYREJECTED, 0)
		c.Read(keys.UserKeyring)
		if conn, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET")); err == nil {
			wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
			wire.ReadFrame(conn, nil)
			conn.Write([]byte("\x00\x00\x00\x10this is not a request at all"))
			conn.Close()
		}
		fmt.Println("\x00\xff garbage on stdout")
		fmt.Fprintln(os.Stderr, "garbage on stderr")
		return 0
	}
	return 2
}
