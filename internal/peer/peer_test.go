package peer

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// The groups the daemon checks are the ones the kernel recorded when the
// client connected (SO_PEERGROUPS), not what /proc says of its pid later:
// by the time a slow daemon looks, the client may be gone and its pid
// another process's. Here the client has exited before the daemon
// accepts, so /proc has nothing for its pid at all.
func TestPeerGroupsComeFromTheSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a client with chosen supplementary groups")
	}
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{"UKEYS_TEST_CHILD=connect", "UKEYS_SOCKET=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 4243, Groups: []uint32{4242, 4244}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client: %v %s", err, out)
	}
	uc, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))); err == nil {
		t.Skip("the client's pid is already in use again")
	}
	cred, err := Of(uc)
	if err != nil {
		t.Fatal(err)
	}
	if cred.GID != 4243 || !slices.Contains(cred.Groups, 4242) || !slices.Contains(cred.Groups, 4244) {
		t.Fatalf("peer credentials %+v: want gid 4243 and groups 4242, 4244 as the client had them", cred)
	}
}

// TestMain runs the test binary as a client when a test starts it so:
// it connects to UKEYS_SOCKET and exits at once.
func TestMain(m *testing.M) {
	if os.Getenv("UKEYS_TEST_CHILD") == "connect" {
		if c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET")); err == nil {
			c.Close()
		}
		return
	}
	os.Exit(m.Run())
}
