package server

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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
	cred, err := peerCred(uc)
	if err != nil {
		t.Fatal(err)
	}
	if cred.GID != 4243 || !slices.Contains(cred.Groups, 4242) || !slices.Contains(cred.Groups, 4244) {
		t.Fatalf("peer credentials %+v: want gid 4243 and groups 4242, 4244 as the client had them", cred)
	}
}

// /proc/<pid>/stat lines, the command names of which a process chooses:
// spaces and parentheses in them do not shift the fields.
func TestParseStat(t *testing.T) {
	line := func(comm string) []byte {
		return []byte("4242 (" + comm + ") S 17 4242 4242 0 -1 4194560 150 0 0 0 1 2 0 0 20 0 1 0 987654 12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	}
	for _, comm := range []string{"ukeyctl", "a b", ") S 1 2 3 (", "((", "x) 99 99 99"} {
		st, ok := parseStat(line(comm))
		if !ok || st.ppid != 17 || st.sid != 4242 || st.start != "987654" {
			t.Errorf("comm %q: %+v %v", comm, st, ok)
		}
	}
	for _, bad := range []string{"", "4242 ukeyctl S 17", "4242 (x) S 17 1 2", "4242 (x) S -1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 5 0"} {
		if st, ok := parseStat([]byte(bad)); ok {
			t.Errorf("%q parsed as %+v", bad, st)
		}
	}
	sid, _ := unix.Getsid(0)
	if st, ok := readStat(os.Getpid()); !ok || st.ppid != os.Getppid() || st.sid != sid {
		t.Errorf("this process's own stat: %+v %v, parent %d, session %d", st, ok, os.Getppid(), sid)
	}
}

// Whatever a command name or a damaged file holds, parsing never panics,
// and what it accepts has a parent pid that is a number and a start
// time of digits.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"))
	f.Add([]byte("7 (a) b)) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := parseStat(b)
		if !ok {
			return
		}
		if st.ppid < 0 || st.start == "" {
			t.Fatalf("%q parsed as %+v", b, st)
		}
		for _, c := range st.start {
			if c < '0' || c > '9' {
				t.Fatalf("start time %q", st.start)
			}
		}
	})
}
