package server_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/procfs"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	testChildren["setuid-exec-connect"] = setuidExecConnectChild
	testChildren["setuid-exec-sleep"] = func() { time.Sleep(time.Minute) }
}

// setuidExecConnectChild (an unprivileged uid) connects to the daemon,
// leaves the connection to a child of its own (caplessUseChild, which
// asks for another uid's persistent keyring), and then runs a setuid-root
// program ($UKEYS_TEST_SETUID) that stays: itself, now with root's
// capabilities, under the pid the connection was made from.
func setuidExecConnectChild() {
	syscall.Close(connectForChild())
	// The test reads the child's output to its end: the program that
	// stays keeps none of it open.
	if null, err := syscall.Open("/dev/null", syscall.O_RDWR, 0); err == nil {
		syscall.Dup2(null, 1)
		syscall.Dup2(null, 2)
	}
	prog := os.Getenv("UKEYS_TEST_SETUID")
	err := syscall.Exec(prog, []string{prog, "-test.run=^$"}, []string{"UKEYS_TEST_CHILD=setuid-exec-sleep"})
	fmt.Println("exec:", err)
	os.Exit(1)
}

// A process's capabilities are read when the daemon meets it, but the
// connection's credentials are those it connected with. An unprivileged
// process that connects and then runs a setuid-root program (su waiting
// for a password) has root's capabilities by the time the daemon reads
// them, while another process of its own holds the connection: before,
// that connection had CAP_SETUID, and another uid's persistent keyring.
// Capabilities now count only while the process's effective uid is still
// the one it connected with. The daemon here starts accepting only once
// the program runs as root.
func TestCapabilitiesGainedByExecAfterConnectCountForNothing(t *testing.T) {
	ukeystest.NeedRoot(t, "to make a setuid-root program")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	// Below a directory that uid 1003 may pass through (t.TempDir's
	// parent is root's alone).
	dir, err := os.MkdirTemp("", "ukeys-setuid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ukeyd.sock")
	ln, err := server.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o666)
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{Logger: quiet})
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	suid := filepath.Join(dir, "setuid.test")
	ukeystest.CopyExecutable(t, os.Args[0], suid)
	if err := os.Chmod(suid, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=1003", "--regid=1003", "--clear-groups", bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=setuid-exec-connect", "UKEYS_TEST_SETUID=" + suid}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// Until the program runs as root (or the filesystem ignores setuid).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		// Real uid 1003 (setpriv has made it so), effective 0 (the
		// setuid program runs).
		if st, ok := procfs.ReadStatus(cmd.Process.Pid); ok && st.UIDs[0] == 1003 && st.UIDs[1] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Skip("the setuid program never ran as root here (a nosuid filesystem?)")
		}
	}
	if got, want := serveUntilRead(t, srv, ln, r), "get_persistent: error: operation not permitted\n"; got != want {
		t.Fatalf("uid 1003 after its connecting process ran a setuid-root program: said\n%s\nwant\n%s", got, want)
	}
}
