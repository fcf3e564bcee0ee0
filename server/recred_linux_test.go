package server_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	testChildren["recred-first"] = recredFirstChild
	testChildren["recred-second"] = recredSecondChild
}

// recredFirstChild is root with its capabilities: it asks for uid
// 1003's persistent keyring (CAP_SETUID), keeps its connection open
// across an exec, and execs setpriv, which drops every capability and
// execs this binary again as recredSecondChild, in the same process.
func recredFirstChild() {
	c := childDial()
	fmt.Println("with capabilities:", errText(errnoErr(childPersistent(c, 1003).Errno)))
	// The connection stays open across the exec (File's duplicate has
	// no close-on-exec), so that the daemon keeps knowing the process.
	if _, err := c.(*net.UnixConn).File(); err != nil {
		fmt.Println("file:", err)
		os.Exit(1)
	}
	setpriv := os.Getenv("UKEYS_TEST_SETPRIV")
	err := syscall.Exec(setpriv, []string{setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", os.Args[0], "-test.run=^$"},
		[]string{"UKEYS_SOCKET=" + os.Getenv("UKEYS_SOCKET"), "UKEYS_TEST_CHILD=recred-second"})
	fmt.Println("exec:", err)
	os.Exit(1)
}

// recredSecondChild is the same process, uid 0 still, without a
// capability: a new connection asks again.
func recredSecondChild() {
	var st, _ = os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "CapEff:") && strings.TrimSpace(strings.TrimPrefix(l, "CapEff:")) != "0000000000000000" {
			fmt.Println("capabilities left:", l)
			os.Exit(1)
		}
	}
	c := childDial()
	defer c.Close()
	fmt.Println("without:", errText(errnoErr(childPersistent(c, 1003).Errno)))
}

// TestCapabilitiesDroppedCountOnReconnect: a process the daemon knows
// drops its capabilities (a service sandboxing itself, an exec through
// setpriv, a program it runs) and connects again. The kernel checks the
// credentials a task has at each call; the daemon must not go on
// granting what it learnt at the first connection.
func TestCapabilitiesDroppedCountOnReconnect(t *testing.T) {
	ukeystest.NeedRoot(t, "to hold CAP_SETUID and drop it")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755))
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=recred-first", "UKEYS_TEST_SETPRIV=" + setpriv}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if got, want := string(out), "with capabilities: ok\nwithout: error: operation not permitted\n"; got != want {
		t.Errorf("the child said\n%s\nwant\n%s", got, want)
	}
}
