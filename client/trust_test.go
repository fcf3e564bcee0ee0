package client

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The uids the tests act for: the caller (when the test runs as root;
// otherwise the caller is whoever runs it) and another user.
const (
	testUser  = 1000
	testOther = 1002
)

// shortTempDir is a temporary directory with a path short enough for a
// socket address (t.TempDir's, named after the test, may not be).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ukt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// bindSocket leaves a socket file at path (bound, never listening).
func bindSocket(t *testing.T, path string) {
	t.Helper()
	fd, err := unixSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
}

func lchown(t *testing.T, path string, uid int) {
	t.Helper()
	if uid == os.Geteuid() {
		return
	}
	if err := os.Lchown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}

func TestCheckSocketPath(t *testing.T) {
	me, root, other := os.Geteuid(), 0, testOther
	if me == 0 {
		me = testUser // root chowns what it makes to the user it acts for
	}
	const ok, enoent = "", "ENOENT"
	tests := []struct {
		name     string
		dir      string // dir, symlink, file or missing
		dirOwner int
		dirMode  uint32
		sock     string // none, socket, symlink or file
		sockUID  int
		want     string // ok, enoent or a piece of the reason
	}{
		{"own 0700", "dir", me, 0o700, "socket", me, ok},
		{"own 0755", "dir", me, 0o755, "socket", me, ok},
		{"root 0755", "dir", root, 0o755, "socket", root, ok},
		{"own 0700, socket of another", "dir", me, 0o700, "socket", other, ok}, // only we or root could have put it there; checkPeer decides
		{"own 0700, no socket", "dir", me, 0o700, "none", 0, ok},               // connect tells (TestDialNoDaemon)
		{"another's", "dir", other, 0o700, "socket", other, "its directory DIR belongs to uid 1002, not to you (uid ME) or root"},
		{"another's 0755", "dir", other, 0o755, "none", 0, "belongs to uid 1002"},
		{"group-writable", "dir", me, 0o770, "socket", me, "its directory DIR is writable by other users (mode 0770)"},
		{"other-writable", "dir", me, 0o703, "socket", me, "writable by other users (mode 0703)"},
		{"root 0777", "dir", root, 0o777, "socket", me, "writable by other users (mode 0777)"},
		{"sticky, own socket", "dir", root, 0o1777, "socket", me, ok},
		{"sticky, root's socket", "dir", root, 0o1777, "socket", root, ok},
		{"sticky, another's socket", "dir", root, 0o1777, "socket", other, "it belongs to uid 1002, not to you (uid ME) or root, in the shared directory DIR"},
		{"sticky, link to a socket", "dir", root, 0o1777, "symlink", me, "it is not a socket, in the shared directory DIR"},
		{"sticky, file", "dir", root, 0o1777, "file", me, "it is not a socket"},
		{"sticky, no socket", "dir", root, 0o1777, "none", 0, enoent},
		{"sticky, another's directory", "dir", other, 0o1777, "socket", me, "belongs to uid 1002"},
		{"symlink to own directory", "symlink", me, 0o700, "socket", me, "its directory DIR is a symbolic link"},
		{"a file", "file", me, 0o600, "none", 0, "DIR is not a directory"},
		{"missing", "missing", me, 0, "none", 0, enoent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if os.Geteuid() != 0 && (tt.dirOwner != me || tt.sock != "none" && tt.sockUID != me) {
				t.Skip("needs root to make files that belong to other uids")
			}
			base := shortTempDir(t)
			dir := filepath.Join(base, "d")
			path := filepath.Join(dir, "ukeyd.sock")
			switch tt.dir {
			case "dir":
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Chmod(dir, tt.dirMode); err != nil {
					t.Fatal(err)
				}
			case "symlink":
				real := filepath.Join(base, "real")
				if err := os.Mkdir(real, 0o700); err != nil {
					t.Fatal(err)
				}
				lchown(t, real, tt.dirOwner)
				if err := os.Symlink(real, dir); err != nil {
					t.Fatal(err)
				}
			case "file":
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			switch tt.sock {
			case "socket":
				bindSocket(t, path)
				lchown(t, path, tt.sockUID)
			case "symlink":
				target := filepath.Join(base, "s")
				bindSocket(t, target)
				lchown(t, target, tt.sockUID)
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
				lchown(t, path, tt.sockUID)
			case "file":
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				lchown(t, path, tt.sockUID)
			}
			if tt.dir != "missing" {
				lchown(t, dir, tt.dirOwner)
			}

			err := checkSocketPath(path, me)
			switch tt.want {
			case ok:
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case enoent:
				if !errors.Is(err, syscall.ENOENT) || errors.Is(err, ErrUntrusted) {
					t.Fatalf("got %v, want ENOENT (no daemon) and not ErrUntrusted", err)
				}
			default:
				want := strings.NewReplacer("DIR", dir, "ME", strconv.Itoa(me)).Replace(tt.want)
				if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), want) ||
					!strings.HasPrefix(err.Error(), "ukeys: refusing to use "+path+": ") {
					t.Fatalf("got %v, want ErrUntrusted saying %q", err, want)
				}
				if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("%v reads as no daemon, which would start one", err)
				}
			}
		})
	}
	// An abstract socket has no directory to check.
	if err := checkSocketPath("@ukeys-test", me); err != nil {
		t.Errorf("abstract socket: %v", err)
	}
}

// No daemon is told apart from an untrusted one: autostart relies on it.
func TestDialNoDaemon(t *testing.T) {
	dir := shortTempDir(t)
	for _, c := range []struct {
		path string
		want syscall.Errno
	}{
		{filepath.Join(dir, "missing", "ukeyd.sock"), syscall.ENOENT},
		{filepath.Join(dir, "ukeyd.sock"), syscall.ENOENT},
		{filepath.Join(dir, "stale.sock"), syscall.ECONNREFUSED},
	} {
		if c.want == syscall.ECONNREFUSED {
			bindSocket(t, c.path)
		}
		_, err := dialUnix(c.path, time.Second, false)
		if !errors.Is(err, c.want) || errors.Is(err, ErrUntrusted) {
			t.Errorf("%s: got %v, want %v", c.path, err, c.want)
		}
	}
}
