package server_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

func init() {
	testChildren["userns-flood-enter"] = usernsFloodEnter
	testChildren["userns-flood"] = usernsFlood
	testChildren["userns-flood-uid"] = usernsFloodUID
}

// The attack of subordinate uids: user U maps uids of its own into a user
// namespace (newuidmap, from /etc/subuid), each a uid of its own to
// SO_PEERCRED, and connects from each of them until the daemon is full.
// Here root writes the map from outside, as the setuid newuidmap does.
// Every connection of the namespace is U's: U's bound holds them all,
// the ones beyond it are refused with EDQUOT, and another user is
// served. Before the daemon charged a namespace's uids to its owner,
// each mapped uid had a bound of its own: 4 uids × 4 connections were
// all accepted where U's bound is 4.
func TestSubordinateUIDsChargedToTheirUser(t *testing.T) {
	ukeystest.NeedRoot(t, "to write a user namespace's uid map from outside, as newuidmap does")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	const (
		owner   = 1731   // U, who makes the namespace
		base    = 310000 // U's subordinate uids, as /etc/subuid would give them
		mapped  = 4      // uids 1..mapped of the namespace connect
		perUID  = 4      // the bound on one uid's connections
		attempt = perUID // connections each mapped uid tries
	)
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755), ukeystest.WithConfig(server.Config{
		Limits: server.Limits{MaxConns: 64, MaxConnsPerUID: perUID, MaxProcs: 64, MaxProcsPerUID: 16},
	}))
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)

	cmd := exec.Command(setpriv, "--reuid="+strconv.Itoa(owner), "--regid="+strconv.Itoa(owner), "--clear-groups", "--",
		unshare, "--user", "--", bin)
	cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=userns-flood-enter",
		"UKEYS_TEST_MAPPED=" + strconv.Itoa(mapped), "UKEYS_TEST_ATTEMPTS=" + strconv.Itoa(attempt)}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "in namespace\n" {
		t.Fatalf("the child did not enter its namespace: %q %v", line, err)
	}
	// The map newuidmap would write: 0 is U, 1..mapped U's subordinates.
	idMap := fmt.Sprintf("0 %d 1\n1 %d %d\n", owner, base+1, mapped)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f), []byte(idMap), 0); err != nil {
			t.Fatalf("writing the namespace's %s: %v", f, err)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	accepted, refused := 0, 0
	for {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("the namespace's children: %v (accepted %d, refused %d so far)", err, accepted, refused)
		}
		line = strings.TrimSpace(line)
		if line == "all connected" {
			break
		}
		switch {
		case strings.HasSuffix(line, " ok"):
			accepted++
		case strings.HasSuffix(line, " refused "+strconv.Itoa(int(syscall.EDQUOT))):
			refused++
		default:
			t.Fatalf("a child of the namespace: %q", line)
		}
	}
	if accepted != perUID || refused != mapped*attempt-perUID {
		t.Fatalf("%d uids of one user's namespace held %d connections (%d refused); want the user's bound, %d, and EDQUOT for the other %d",
			mapped, accepted, refused, perUID, mapped*attempt-perUID)
	}
	// Another user is served while U is at its bound.
	c, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := hello(c); err != nil {
		t.Fatalf("another user, with the namespace's user at its bound: %v", err)
	}
	if r, err := rawCall(c, 1, wire.OpGetKeyringID, wire.Int(-4), wire.Int(1)); err != nil || r.Errno != 0 {
		t.Fatalf("another user's call: %v %v", r, err)
	}
}

// usernsFloodEnter runs in the namespace that unshare made, before its
// map is written: it says so, waits for the map, and runs itself again,
// as the namespace's uid 0 with its capabilities.
func usernsFloodEnter() {
	fmt.Println("in namespace")
	var line string
	if _, err := fmt.Scanln(&line); err != nil || line != "go" {
		os.Exit(1)
	}
	os.Setenv("UKEYS_TEST_CHILD", "userns-flood")
	if err := syscall.Exec("/proc/self/exe", os.Args, os.Environ()); err != nil {
		fmt.Println("exec:", err)
		os.Exit(1)
	}
}

// usernsFlood starts a child as each mapped uid, one after another, each
// of which connects as often as it is told and holds what it got; it
// relays their lines, and ends them when its input closes.
func usernsFlood() {
	mapped, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_MAPPED"))
	var holds []io.Closer
	for uid := 1; uid <= mapped; uid++ {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=userns-flood-uid")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		in, _ := cmd.StdinPipe()
		outp, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Println("start:", err)
			os.Exit(1)
		}
		holds = append(holds, in)
		r := bufio.NewReader(outp)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				fmt.Println("child:", err)
				os.Exit(1)
			}
			if line == "done\n" {
				break
			}
			fmt.Print(line)
		}
	}
	fmt.Println("all connected")
	io.Copy(io.Discard, os.Stdin)
	for _, h := range holds {
		h.Close()
	}
}

// usernsFloodUID connects UKEYS_TEST_ATTEMPTS times, saying for each
// whether it was accepted, and holds the connections until its input
// closes.
func usernsFloodUID() {
	n, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_ATTEMPTS"))
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		// A refusal may be written, and the connection closed, before
		// the hello is sent: it is read all the same.
		wire.WriteFrame(c, wire.EncodeHello(wire.Version))
		var b []byte
		if b, err = wire.ReadFrame(c, nil); err == nil {
			_, err = wire.DecodeHello(b)
		}
		var refused *wire.Refused
		switch {
		case err == nil:
			fmt.Printf("uid %d connection %d ok\n", os.Getuid(), i)
			conns = append(conns, c)
		case errors.As(err, &refused):
			fmt.Printf("uid %d connection %d refused %d\n", os.Getuid(), i, refused.Errno)
			c.Close()
		default:
			fmt.Printf("uid %d connection %d: %v\n", os.Getuid(), i, err)
			c.Close()
		}
	}
	fmt.Println("done")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}
