package peer_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/ukeys/ukeys/internal/peer"
)

// A server learns who connected from the kernel, not from the client.
func ExampleOf() {
	dir, _ := os.MkdirTemp("", "peer")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	uc, err := ln.AcceptUnix()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer uc.Close()
	cred, err := peer.Of(uc)
	fmt.Println(err == nil && cred.UID == uint32(os.Geteuid()) && (cred.PID == os.Getpid() || cred.PID == 0))
	// Output: true
}
