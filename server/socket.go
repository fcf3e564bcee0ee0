package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
)

// DefaultSocket returns where the daemon listens by default:
// $UKEYS_SOCKET if set; for root the system socket, /run/ukeys/ukeyd.sock
// (/var/run on macOS and the BSDs, or $UKEYS_SYSTEM_SOCKET), where it
// serves every user of the host; else the user's own,
// $XDG_RUNTIME_DIR/ukeys/ukeyd.sock, falling back to a per-user
// directory under the temporary directory.
func DefaultSocket() string { return endpoint.Listen() }

// ErrInUse reports a socket that a live daemon already serves.
var ErrInUse = errors.New("server: socket in use by a live daemon")

// Listen creates the socket's directory if it does not exist, 0755 for a
// root daemon that serves every user and 0700 for a user's own (the socket
// itself is 0666: whoever can reach it may connect, and the daemon checks
// each caller's credentials), refuses a path that another live
// daemon answers on, and removes a stale socket left by a dead one.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return nil, err
	}
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("server: %s is not a directory", dir)
	}
	// Whoever owns or may write the directory could put their own socket
	// in the daemon's place: it must be the daemon's user's (or root's),
	// and writable by others only if sticky (as /tmp is).
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if int(sys.Uid) != os.Geteuid() && sys.Uid != 0 {
			return nil, fmt.Errorf("server: %s belongs to uid %d", dir, sys.Uid)
		}
		if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
			return nil, fmt.Errorf("server: %s is writable by other users", dir)
		}
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, 500*time.Millisecond); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
