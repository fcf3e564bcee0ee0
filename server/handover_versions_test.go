package server_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

var updateHandover = flag.Bool("update-handover", false, "rewrite testdata/handover-v*.state with a state of this version")

// A daemon takes over from the release before it: the state every
// version of the hand-over wrote (testdata/handover-vN.state: the keys'
// stream and the records, as Freeze writes them, kept once written)
// still thaws, with its keys, its session token and its login.
func TestHandOverFromEarlierVersions(t *testing.T) {
	name := fmt.Sprintf("testdata/handover-v%d.state", server.HandoverVersion)
	if *updateHandover {
		path := filepath.Join(t.TempDir(), "ukeyd.sock")
		svc, srv, served := oldDaemon(t, path)
		c, err := client.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := c.AddKey("user", "from-earlier", []byte("kept"), keys.UserKeyring)
		if err != nil {
			t.Fatal(err)
		}
		// Readable by its owner without possessing it: the reader below
		// may be this very process, whose record (and session) comes
		// back when it runs right after the update.
		if err := c.SetPerm(kept, keys.PossAll|keys.UserAll); err != nil {
			t.Fatal(err)
		}
		if _, err := c.JoinSessionKeyring(nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddKey("user", "in-session", []byte("gone with its process"), keys.SessionKeyring); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		fds, err := srv.Freeze(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		<-served
		c.Close()
		svc.Close()
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob("testdata/handover-v*.state")
	if len(files) < server.HandoverVersion {
		t.Fatalf("%d states of earlier versions in testdata, want one for each of the %d versions", len(files), server.HandoverVersion)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// No descriptor comes with it, and the processes it names are
		// long gone: what they held goes; the user keyring's key stays.
		res, err := server.Thaw(bytes.NewReader(b), nil, nil, server.Config{Logger: quiet})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		path := filepath.Join(t.TempDir(), "ukeyd.sock")
		ln, err := server.Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- res.Server.Serve(ln) }()
		c, err := client.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.Search(keys.UserKeyring, "user", "from-earlier", 0)
		if err != nil {
			t.Fatalf("%s: the user keyring's key: %v", f, err)
		}
		if v, err := c.Read(id); err != nil || string(v) != "kept" {
			t.Fatalf("%s: %q %v", f, v, err)
		}
		c.Close()
		res.Server.Shutdown(t.Context())
		<-served
		res.Service.Close()
	}
}
