package endpoint

import (
	"os"
	"path/filepath"
	"strconv"
)

// SocketEnv overrides where the daemon listens and clients connect.
const SocketEnv = "UKEYS_SOCKET"

// SystemSocketEnv moves the system daemon's socket (for a packager, or a
// test that must not touch the host's): where a daemon run by root
// listens by default, and where clients look for it.
const SystemSocketEnv = "UKEYS_SYSTEM_SOCKET"

// HelperEnv is the environment variable through which a request-key
// helper started by the daemon receives the token that lets it act with
// the authority to construct the key (and with nothing else).
const HelperEnv = "UKEYS_HELPER_TOKEN"

// System returns the system daemon's socket: the one a daemon run by
// root listens on, serving every user of the host as the kernel's
// keyrings do. It is /run/ukeys/ukeyd.sock (on macOS and the BSDs
// /var/run/ukeys/ukeyd.sock), or $UKEYS_SYSTEM_SOCKET.
func System() string {
	if p := os.Getenv(SystemSocketEnv); p != "" {
		return p
	}
	return rootSocket
}

// User returns the socket of a user's own daemon, which holds that
// user's keys only: $XDG_RUNTIME_DIR/ukeys/ukeyd.sock, falling back to a
// per-user directory under the temporary directory.
func User() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ukeys", "ukeyd.sock")
	}
	return filepath.Join(os.TempDir(), "ukeys-"+strconv.Itoa(os.Geteuid()), "ukeyd.sock")
}

// Listen returns where a daemon listens by default: $UKEYS_SOCKET if
// set; the system socket for root; else the user's own.
func Listen() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return System()
	}
	return User()
}

// Socket returns where a client finds its daemon: $UKEYS_SOCKET if set;
// else the system daemon's socket, for root always and for anyone else
// when one is there; only otherwise the user's own daemon's. One daemon
// then serves every user of the host, so that keys shared between users
// (chown, group and other permissions, persistent keyrings) live in one
// store.
func Socket() string { return socketFor(os.Geteuid()) }

func socketFor(euid int) string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	sys := System()
	if euid == 0 {
		return sys
	}
	if st, err := os.Stat(sys); err == nil && st.Mode()&os.ModeSocket != 0 {
		return sys
	}
	return User()
}

// Scope says whom a daemon running with effective uid euid serves, for
// its log and its status: every user when root, else only its own user
// (its socket's directory admits nobody else).
func Scope(euid int) string {
	if euid == 0 {
		return "every user"
	}
	return "uid " + strconv.Itoa(euid) + " only"
}
