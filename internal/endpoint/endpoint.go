package endpoint

import (
	"os"
	"path/filepath"
	"strconv"
)

// SocketEnv overrides where the daemon listens.
const SocketEnv = "UKEYS_SOCKET"

// HelperEnv is the environment variable through which a request-key
// helper started by the daemon receives the token that lets it act with
// the authority to construct the key (and with nothing else).
const HelperEnv = "UKEYS_HELPER_TOKEN"

// Socket returns where the daemon listens for the calling user:
// $UKEYS_SOCKET if set; /run/ukeys/ukeyd.sock for root (on macOS and
// the BSDs /var/run/ukeys/ukeyd.sock); else
// $XDG_RUNTIME_DIR/ukeys/ukeyd.sock, falling back to a per-user
// directory under the temporary directory.
func Socket() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return rootSocket
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ukeys", "ukeyd.sock")
	}
	return filepath.Join(os.TempDir(), "ukeys-"+strconv.Itoa(os.Geteuid()), "ukeyd.sock")
}
