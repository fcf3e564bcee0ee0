package endpoint

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSocket(t *testing.T) {
	t.Setenv(SocketEnv, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	want := rootSocket
	if os.Geteuid() != 0 {
		want = "/run/user/1000/ukeys/ukeyd.sock"
	}
	if got := Socket(); got != want {
		t.Fatalf("Socket() = %q, want %q", got, want)
	}
	if os.Geteuid() != 0 {
		t.Setenv("XDG_RUNTIME_DIR", "")
		want = filepath.Join(os.TempDir(), "ukeys-"+strconv.Itoa(os.Geteuid()), "ukeyd.sock")
		if got := Socket(); got != want {
			t.Fatalf("Socket() without XDG_RUNTIME_DIR = %q, want %q", got, want)
		}
	}
	t.Setenv(SocketEnv, "/elsewhere/s")
	if got := Socket(); got != "/elsewhere/s" {
		t.Fatalf("Socket() with %s = %q", SocketEnv, got)
	}
}
