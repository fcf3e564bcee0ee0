package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/ukeystest"
)

// storeArg as the first argument makes this test binary a client that
// finds its daemon as any program does (client.DefaultSocket) and then
// either shares a key ("share") or reads one by serial ("read N").
const storeArg = "ukeyd-test-store"

func storeMain(args []string) int {
	path := client.DefaultSocket()
	os.Stderr.WriteString("socket " + path + "\n")
	c, err := client.Dial(path)
	if err != nil {
		os.Stderr.WriteString("dial: " + err.Error() + "\n")
		return 1
	}
	defer c.Close()
	switch args[0] {
	case "share":
		// A key in the user's own keyring that others may read.
		id, err := c.AddKey("user", "shared", []byte("from uid "+strconv.Itoa(os.Geteuid())), keyctl.UserKeyring)
		if err == nil {
			err = c.SetPerm(id, keyctl.PossAll|keyctl.UserAll|(keyctl.View|keyctl.Read)<<keyctl.OtherShift)
		}
		if err != nil {
			os.Stderr.WriteString("share: " + err.Error() + "\n")
			return 1
		}
		os.Stdout.WriteString(strconv.Itoa(int(id)) + "\n")
	case "read":
		id, _ := strconv.Atoi(args[1])
		b, err := c.Read(keyctl.Serial(id))
		if err != nil {
			os.Stderr.WriteString("read: " + err.Error() + "\n")
			return 1
		}
		os.Stdout.Write(b)
	case "status":
		st, err := c.Status()
		if err != nil {
			return 1
		}
		os.Stdout.WriteString(st)
	}
	return 0
}

// One daemon started as README says (as root, no socket named) serves
// every user of the host, and their programs find it without being told
// where: a key one uid shares is read by another.
func TestOneStoreForEveryUser(t *testing.T) {
	ukeystest.NeedRoot(t, "users other than root connect to a root daemon")
	// Outside the test's own temporary directory, which only root may
	// enter.
	base, err := os.MkdirTemp("", "ukeyd-onestore-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	system := filepath.Join(base, "run", "ukeyd.sock")
	d := startChild(t, system, childOpts{defaultSocket: true,
		env: []string{endpoint.SocketEnv + "=", endpoint.SystemSocketEnv + "=" + system}})
	if !strings.Contains(d.stderrText(), "scope=\"every user\"") {
		t.Errorf("the daemon does not say it serves every user:\n%s", d.stderrText())
	}
	bin := filepath.Join(base, "ukeyd.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	as := func(uid uint32, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{storeArg}, args...)...)
		// Nothing but where the system daemon is (as a packager may
		// move it): no UKEYS_SOCKET, a runtime directory of the user's
		// own where a per-user daemon would be.
		cmd.Env = []string{endpoint.SystemSocketEnv + "=" + system, "XDG_RUNTIME_DIR=" + filepath.Join(base, "user", strconv.Itoa(int(uid)))}
		cmd.SysProcAttr = ukeystest.As(uid, uid)
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("uid %d %v: %v\n%s", uid, args, err, errb.String())
		}
		return string(out), errb.String()
	}
	id, log := as(1000, "share")
	if !strings.Contains(log, "socket "+system) {
		t.Fatalf("uid 1000 did not find the system daemon: %s", log)
	}
	got, _ := as(1001, "read", strings.TrimSpace(id))
	if got != "from uid 1000" {
		t.Fatalf("uid 1001 read %q", got)
	}
	st, _ := as(1001, "status")
	if !strings.Contains(st, "scope: every user\n") {
		t.Fatalf("status:\n%s", st)
	}
}
