package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// ukeyctl defers its handshake to its first call (one round trip fewer
// a command); a daemon that refuses the process then fails that call,
// and ukeyctl says so as it says a refused connect, not as the call's
// errno.
func TestRefusalAtTheFirstCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("UKEYS_SOCKET", path)
	t.Setenv("UKEYS_NO_AUTOSTART", "1")
	t.Setenv(client.SessionEnv, "")
	t.Setenv(server.HelperEnv, "")
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wire.WriteFrame(conn, wire.EncodeRefusal(uint16(keyctl.EDQUOT)))
			conn.Close()
		}
	}()
	for _, args := range [][]string{{"print", "123"}, {"add", "user", "k", "v", "@s"}} {
		r := run("ukeyctl", "", args...)
		want := "ukeyctl: ukeyd at " + path + " refuses this process: your uid holds its share"
		if r.Code != 1 || !strings.HasPrefix(r.Stderr, want) || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("%v against a daemon that refuses: %+v, want exit 1 and %q", args, r, want)
		}
	}
}
