package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() {
	testChildren["takeover-victim"] = takeoverVictimChild
	testChildren["capless-takeover"] = caplessTakeoverChild
}

// takeoverVictimChild (uid 1003) adds a secret to its user keyring and prints
// the key's serial.
func takeoverVictimChild() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	id, err := c.AddKey("user", "secret", []byte("uid-1003-private-payload"), keys.UserKeyring)
	if err != nil {
		fmt.Println("add:", err)
		os.Exit(1)
	}
	fmt.Println(id)
}

// caplessTakeoverChild is uid 0 with no capability at all (a
// container's root without a user namespace, a sandboxed root service):
// it cannot read uid 1003's key through the daemon, so it asks the
// daemon to hand everything over to it.
func caplessTakeoverChild() {
	path := os.Getenv("UKEYS_SOCKET")
	id, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_SERIAL"))
	c, err := client.Dial(path)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	_, err = c.Read(keys.Serial(id))
	fmt.Println("normal read as capless root:", err)
	c.Close()
	res, err := server.TakeOver(path, nil, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println("takeover:", err)
		os.Exit(1)
	}
	fmt.Printf("took over: %d keys, %d connections\n", res.Keys, res.Conns)
	v := res.Service.NewCaller(keys.Cred{UID: 1003, GID: 1003, CapsKnown: true})
	b, err := v.Read(keys.Serial(id))
	fmt.Printf("stolen payload: %q %v\n", b, err)
	v.Release()
	for _, ln := range res.Listeners {
		ln.Close()
	}
	res.Server.Shutdown(context.Background())
	res.Service.Close()
}

// Only the daemon's equal may take over its keys: its uid, and every
// capability it holds. A uid-0 process without capabilities (a
// container's root, a service with an empty bounding set) cannot read
// another uid's key through the daemon, and may not have the daemon hand
// it every key either; before, the check was of the uid alone, and it
// was given every user's keys, the socket and the clients.
func TestCaplessRootCannotTakeOver(t *testing.T) {
	ukeystest.NeedRoot(t, "to run processes as other uids")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv")
	}
	dir, err := os.MkdirTemp("", "ukeys-takeover-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "run", "ukeyd.sock")
	svc := keys.New()
	srv := server.New(svc, server.Config{Logger: quiet})
	ln, err := server.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	bin := filepath.Join(dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)

	cmd := exec.Command(setpriv, "--reuid=1003", "--regid=1003", "--clear-groups", bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=takeover-victim"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("victim: %v %s", err, out)
	}
	serial := strings.TrimSpace(string(out))

	cmd = exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", bin, "-test.run=^$")
	cmd.Env = []string{"UKEYS_SOCKET=" + path, "UKEYS_TEST_CHILD=capless-takeover", "UKEYS_TEST_SERIAL=" + serial}
	out, _ = cmd.CombinedOutput()
	want := "normal read as capless root: read: Permission denied\n" +
		"takeover: server: the old daemon refuses a hand-over to a process less privileged than itself (another user, another user namespace, or fewer capabilities; see its log)\n"
	if string(out) != want {
		t.Errorf("root without capabilities said:\n%s\nwant:\n%s", out, want)
	}
	// The daemon serves on.
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddKey("user", "after", []byte("v"), keys.UserKeyring); err != nil {
		t.Errorf("the daemon after the attempt: %v", err)
	}
	c.Close()
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil && !errors.Is(err, server.ErrClosed) {
		t.Fatalf("Serve: %v", err)
	}
	svc.Close()
}
