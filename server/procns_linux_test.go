package server_test

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() { testChildren["persistent-of-root"] = persistentOfRootChild }

// persistentOfRootChild asks for root's persistent keyring, which only a
// process with CAP_SETUID may have.
func persistentOfRootChild() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	_, err = c.GetPersistent(0, keys.SessionKeyring)
	fmt.Println("get_persistent 0", errText(err))
}

// The attack: a daemon in a pid namespace of its own whose /proc is the
// host's (unshare --pid without --mount-proc). A client's pid, as the
// kernel reports it to the daemon, is a number in the daemon's namespace;
// in the host's /proc that number is another process, typically a kernel
// thread with every capability. Believed, it made an unprivileged uid
// privileged: uid 1003 was given root's persistent keyring. The daemon
// must read nothing of such a /proc.
func TestForeignProcIsNotBelieved(t *testing.T) {
	ukeystest.NeedRoot(t, "to make a pid namespace and run a process as another uid")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	if os.Getenv("UKEYS_TEST_FOREIGN_PROC") == "" {
		// A new pid namespace, the host's /proc.
		inPidNamespace(t, "TestForeignProcIsNotBelieved", false, "UKEYS_TEST_FOREIGN_PROC=1")
		return
	}
	if procfs.Ours() {
		t.Fatal("/proc/self is this process: the namespace was not made as the test needs")
	}
	var logs testutil.Buffer
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755), ukeystest.WithConfig(server.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}))
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	cmd := exec.Command(setpriv, "--reuid=1003", "--regid=1003", "--clear-groups", bin)
	cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=persistent-of-root"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "get_persistent 0 error: get_persistent: Operation not permitted"; got != want {
		t.Fatalf("uid 1003 asking for root's persistent keyring: %q, want %q", got, want)
	}
	if !strings.Contains(logs.String(), "/proc is another pid namespace's") {
		t.Errorf("the daemon did not say why it reads no /proc:\n%s", logs.String())
	}
}
