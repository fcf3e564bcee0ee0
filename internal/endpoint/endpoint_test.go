package endpoint

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListen(t *testing.T) {
	t.Setenv(SocketEnv, "")
	t.Setenv(SystemSocketEnv, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	want := rootSocket
	if os.Geteuid() != 0 {
		want = "/run/user/1000/ukeys/ukeyd.sock"
	}
	if got := Listen(); got != want {
		t.Fatalf("Listen() = %q, want %q", got, want)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got, want := User(), filepath.Join(os.TempDir(), "ukeys-"+strconv.Itoa(os.Geteuid()), "ukeyd.sock"); got != want {
		t.Fatalf("User() without XDG_RUNTIME_DIR = %q, want %q", got, want)
	}
	t.Setenv(SocketEnv, "/elsewhere/s")
	if got := Listen(); got != "/elsewhere/s" {
		t.Fatalf("Listen() with %s = %q", SocketEnv, got)
	}
	if got := Socket(); got != "/elsewhere/s" {
		t.Fatalf("Socket() with %s = %q", SocketEnv, got)
	}
	t.Setenv(SystemSocketEnv, "/sys/s")
	if got := System(); got != "/sys/s" {
		t.Fatalf("System() with %s = %q", SystemSocketEnv, got)
	}
}

// A client finds the system daemon's socket when one is there, and its
// user's own daemon's otherwise.
func TestSocketPrefersTheSystemDaemon(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "system.sock")
	t.Setenv(SocketEnv, "")
	t.Setenv(SystemSocketEnv, sys)
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "user"))
	if got := socketFor(1000); got != User() {
		t.Fatalf("no system daemon: %q, want the user's %q", got, User())
	}
	// A plain file there is not a daemon's socket.
	os.WriteFile(sys, nil, 0o644)
	if got := socketFor(1000); got != User() {
		t.Fatalf("a file at the system path: %q", got)
	}
	os.Remove(sys)
	ln, err := net.Listen("unix", sys)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := socketFor(0); got != sys {
		t.Fatalf("root: %q", got)
	}
	if got := socketFor(1000); got != sys {
		t.Fatalf("with a system daemon: %q, want %q", got, sys)
	}
}

func TestScope(t *testing.T) {
	if got := Scope(0); got != "every user" {
		t.Fatal(got)
	}
	if got := Scope(1000); got != "uid 1000 only" {
		t.Fatal(got)
	}
}
