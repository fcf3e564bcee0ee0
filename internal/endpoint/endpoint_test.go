package endpoint

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// Where another user has made ukeys-UID (here: a directory anyone may
// write, which no daemon may serve from), the user's is a private one
// beside it, made once and found again; the first of the user's by name
// when there are several; never one that others may enter, nor a link.
// Once ukeys-UID is free again, the private one stays in use.
func TestUserDirTaken(t *testing.T) {
	tmp := t.TempDir()
	euid := os.Geteuid()
	base := filepath.Join(tmp, "ukeys-"+strconv.Itoa(euid))
	if got := userDir(tmp, euid); got != base {
		t.Fatalf("free: %q, want %q", got, base)
	}
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := userDir(tmp, euid); got != base {
		t.Fatalf("the user's own: %q, want %q", got, base)
	}
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	// Decoys: open to others, and a link to a private-looking directory.
	open := base + ".0"
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o755)
	real := filepath.Join(tmp, "elsewhere")
	os.Mkdir(real, 0o700)
	os.Symlink(real, base+".00")
	got := userDir(tmp, euid)
	st, err := os.Lstat(got)
	if err != nil || !strings.HasPrefix(got, base+".") || got == open || got == base+".00" || st.Mode() != os.ModeDir|0o700 {
		t.Fatalf("taken: %q (%v, %v), want a new private directory %s.*", got, st.Mode(), err, base)
	}
	if again := userDir(tmp, euid); again != got {
		t.Fatalf("taken, asked again: %q, want %q", again, got)
	}
	// Another made at the same moment, first by name: everyone takes it.
	first := base + ".000"
	if err := os.Mkdir(first, 0o700); err != nil {
		t.Fatal(err)
	}
	if again := userDir(tmp, euid); again != first {
		t.Fatalf("two private directories: %q, want the first by name %q", again, first)
	}
	os.Remove(first)
	// Free again: the private directory stays.
	if err := os.Remove(base); err != nil {
		t.Fatal(err)
	}
	if again := userDir(tmp, euid); again != got {
		t.Fatalf("free again: %q, want the private %q", again, got)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 4 {
		t.Errorf("made more than one private directory: %v", ents)
	}
}
