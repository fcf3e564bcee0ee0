package server_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	// Before exec: a key in @p and one in @t, then a new program in the
	// same process (same pid, same start time).
	testChildren["exec-before"] = func() {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		for _, ring := range []keys.Serial{keys.ProcessKeyring, keys.ThreadKeyring} {
			if _, err := c.AddKey("user", "secret", []byte("old image's"), ring); err != nil {
				fmt.Println("add:", err)
				os.Exit(1)
			}
		}
		c.Close()
		env := []string{"UKEYS_TEST_CHILD=exec-after", "UKEYS_SOCKET=" + os.Getenv("UKEYS_SOCKET")}
		err = syscall.Exec(os.Args[0], []string{os.Args[0], "-test.run=^$"}, env)
		fmt.Println("exec:", err)
		os.Exit(1)
	}
	// After exec: what the new program finds of @p and @t.
	testChildren["exec-after"] = func() {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		for _, ring := range []keys.Serial{keys.ProcessKeyring, keys.ThreadKeyring} {
			_, err := c.GetKeyringID(ring, false)
			fmt.Println(errText(err))
		}
	}
}

// The kernel's execve gives a program neither the thread nor the process
// keyring of the image it replaces. Over the socket, the daemon knew the
// new program by its pid and start time, and gave it both: a program a
// process exec'd possessed that process's keys. The connector's exec
// event now drops them, as the kernel does. Where the daemon does not
// follow processes (no connector: another pid namespace, no
// CAP_NET_ADMIN), it cannot tell an exec, and the test skips.
func TestExecDropsProcessAndThreadKeyrings(t *testing.T) {
	d := startDaemon(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=exec-before", "UKEYS_SOCKET="+d.path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !d.srv.Stats().FollowsForks {
		t.Skip("the daemon does not follow processes here (no process events connector)")
	}
	if want := "error: get_keyring_id: Required key not available\nerror: get_keyring_id: Required key not available\n"; string(out) != want {
		t.Fatalf("after exec, the new program's @p and @t:\n%s\nwant both gone:\n%s", out, want)
	}
}

func init() {
	// A process of a session that starts a program of another uid,
	// which forks ten processes that never connect.
	testChildren["ghost-parent"] = func() {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		if _, err := c.JoinSessionKeyring(nil); err != nil {
			fmt.Println("join:", err)
			os.Exit(1)
		}
		cmd := exec.Command("setpriv", "--reuid=1005", "--regid=1005", "--clear-groups",
			"sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done; echo started; wait")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Println("start:", err)
			os.Exit(1)
		}
		io.Copy(io.Discard, os.Stdin)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Process.Kill()
	}
	testChildren["ghost-try"] = func() {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err == nil {
			_, err = c.GetKeyringID(keys.UserKeyring, true)
		}
		fmt.Println(errText(err))
	}
}

// A child the daemon sees forked by a process it keeps is kept too (a
// ghost), charged to a uid's bound of kept processes: to the child's
// uid, read when the fork is seen. It was charged to its parent's, and
// kept that uid after the child setuid'd, so that a root process
// starting another user's program saw that program's processes, which
// never connected, use up root's bound until root's own were refused.
func TestGhostsAreChargedToTheirOwnUID(t *testing.T) {
	ukeystest.NeedRoot(t, "to run a program as another uid")
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755),
		ukeystest.WithConfig(server.Config{Limits: server.Limits{MaxProcsPerUID: 6, MaxProcs: 64, MaxConnsPerUID: 64}}))
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	parent := exec.Command(bin, "-test.run=^$")
	parent.Env = []string{"UKEYS_TEST_CHILD=ghost-parent", "UKEYS_SOCKET=" + d.Socket, "PATH=" + os.Getenv("PATH")}
	stdin, _ := parent.StdinPipe()
	stdout, _ := parent.StdoutPipe()
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); parent.Wait() }()
	line := make([]byte, 8)
	if n, _ := io.ReadFull(stdout, line); string(line[:n]) != "started\n" {
		t.Fatalf("the other uid's program: %q", line[:n])
	}
	if !d.Server.Stats().FollowsForks {
		t.Skip("the daemon does not follow processes here (no process events connector)")
	}
	// The forks are seen a moment after they are made.
	time.Sleep(200 * time.Millisecond)
	try := exec.Command(bin, "-test.run=^$")
	try.Env = []string{"UKEYS_TEST_CHILD=ghost-try", "UKEYS_SOCKET=" + d.Socket}
	out, _ := try.CombinedOutput()
	if got := strings.TrimSpace(string(out)); got != "ok" {
		t.Fatalf("root's next process, after uid 1005's program forked ten: %s", got)
	}
}
