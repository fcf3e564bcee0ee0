package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/script"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

// TestMain also lets the test binary stand in for the programs the tests
// start: run as keyctl, ukeyctl or request-key it is ukeyctl; run as ukeyd
// it is a small daemon (for the autostart test).
// testPrograms are the programs, other than the commands, that the test
// binary is run as (by the name it is linked under); files of their own,
// some for one system only, register them.
var testPrograms = map[string]func() int{}

func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "keyctl", "ukeyctl", "request-key":
		execProgram = syscall.Exec // a process of its own, as the real command
		code := Main(os.Args, os.Stdin, os.Stdout, os.Stderr)
		snapshot()
		os.Exit(code)
	case "ukeyd":
		os.Exit(fakeDaemon(os.Args[1:]))
	}
	if prog := testPrograms[filepath.Base(os.Args[0])]; prog != nil {
		os.Exit(prog())
	}
	goleak.VerifyTestMain(m)
}

// snapshot appends the daemon's /proc/keys view to the file named by
// $UKEYCTL_TEST_SNAPSHOT, for the side-by-side test to learn serials
// from (as it reads the kernel's /proc/keys after each real keyctl).
func snapshot() {
	f := os.Getenv("UKEYCTL_TEST_SNAPSHOT")
	if f == "" {
		return
	}
	c, err := client.Dial(server.DefaultSocket())
	if err != nil {
		return
	}
	defer c.Close()
	pk, err := c.ProcKeys()
	if err != nil {
		return
	}
	w, err := os.OpenFile(f, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	w.WriteString(pk)
	w.Close()
}

// fakeDaemon serves "-socket path" until SIGTERM, writing its pid beside
// the socket.
func fakeDaemon(args []string) int {
	if len(args) != 2 || args[0] != "-socket" {
		return 2
	}
	path := args[1]
	os.Stderr.WriteString("ukeyd (test): starting on " + path + "\n") // as ukeyd logs, so that tests see where its log goes
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	ln, err := server.Listen(path)
	if err != nil {
		return 1
	}
	if err := os.WriteFile(path+".pid", []byte(itoa(int64(os.Getpid()))), 0o600); err != nil {
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	<-sigs
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	<-done
	return 0
}

// daemon is a ukeyd served in the test process on a temporary socket.
type daemon struct {
	svc  *keys.Service
	srv  *server.Server
	path string
	dir  string
	done chan error
}

// startDaemon starts a daemon and points UKEYS_SOCKET at it.
func startDaemon(t *testing.T, opts ...keys.Option) *daemon {
	t.Helper()
	dir := t.TempDir()
	d := &daemon{dir: dir, path: filepath.Join(dir, "ukeyd.sock"), done: make(chan error, 1)}
	return d.start(t, ukeystest.WithKeys(opts...))
}

// start serves a daemon on d.path (see ukeystest) and points the
// environment the commands read at it.
func (d *daemon) start(t *testing.T, opts ...ukeystest.Option) *daemon {
	t.Helper()
	opts = append([]ukeystest.Option{ukeystest.WithConfig(server.Config{ReadTimeout: time.Minute})}, opts...)
	td := ukeystest.NewDaemon(t, append(opts, ukeystest.WithSocket(d.path))...)
	d.svc, d.srv = td.Service, td.Server
	t.Setenv("UKEYS_SOCKET", d.path)
	t.Setenv("UKEYS_NO_AUTOSTART", "1")
	t.Setenv(client.SessionEnv, "")
	t.Setenv(server.HelperEnv, "")
	return d
}

// shell is a connection that stands for the shell the commands run in:
// while it is open, the test process's keyrings (its session keyring
// above all) live on in the daemon, and every in-process invocation of
// ukeyctl shares them, as commands started by one shell share its session.
func (d *daemon) shell(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(d.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// result is what one invocation produced, as golden scripts record it.
type result = script.Result

// run runs ukeyctl in process under the program name prog.
func run(prog string, stdin string, args ...string) result {
	var out, errb strings.Builder
	code := Main(append([]string{prog}, args...), strings.NewReader(stdin), &out, &errb)
	return result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// binDir makes a directory holding links to the test binary under the
// given names, so that it runs as those programs.
func binDir(t *testing.T, names ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Symlink(exe, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
