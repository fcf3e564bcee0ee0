package ukeystest_test

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDaemon(t *testing.T) {
	d := ukeystest.NewDaemon(t)
	if filepath.Dir(d.Socket) != d.Dir {
		t.Errorf("socket %s not in %s", d.Socket, d.Dir)
	}
	c := d.Dial(t)
	id, err := c.AddKey("user", "k", []byte("v"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.Read(id); err != nil || string(b) != "v" {
		t.Fatalf("read: %q, %v", b, err)
	}
}

// The socket is gone once the test's cleanups have run.
func TestDaemonCleanup(t *testing.T) {
	var sock string
	t.Run("daemon", func(t *testing.T) {
		d := ukeystest.NewDaemon(t)
		d.Dial(t)
		sock = d.Socket
	})
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after cleanup: %v", err)
	}
}

func TestDaemonOptions(t *testing.T) {
	tun := keys.DefaultTunables()
	tun.MaxKeys = 7
	d := ukeystest.NewDaemon(t,
		ukeystest.WithConfig(server.Config{ReadTimeout: 200 * time.Millisecond}),
		ukeystest.WithKeys(keys.WithUpcallTimeout(time.Second)),
		ukeystest.WithHelper("/bin/false"),
		ukeystest.WithTunables(tun),
		ukeystest.WithDirMode(0o755))
	if d.Service.Tunables().MaxKeys != 7 {
		t.Errorf("tunables not applied: %+v", d.Service.Tunables())
	}
	st, err := os.Stat(d.Dir)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("dir %s: %v, %v", d.Dir, st, err)
	}
	if d.Socket != filepath.Join(d.Dir, "run", "ukeyd.sock") {
		t.Errorf("socket %s", d.Socket)
	}
	// The helper fails, so the key is negated: the upcall ran.
	c := d.Dial(t)
	if _, err := c.RequestKey("user", "absent", []byte("info"), 0); err == nil {
		t.Error("request_key with a failing helper succeeded")
	}
	// A connection that stays silent is closed after the read timeout.
	conn, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Errorf("silent connection: %v, want it closed by the daemon", err)
	}
}

func TestDaemonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "my.sock")
	d := ukeystest.NewDaemon(t, ukeystest.WithSocket(path))
	if d.Socket != path || d.Dir != filepath.Dir(path) {
		t.Errorf("socket %s in %s", d.Socket, d.Dir)
	}
	d.Dial(t)
}
