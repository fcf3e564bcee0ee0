package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// Linux only: pid namespaces.

// A daemon in a pid namespace of its own (a container) sees every caller
// from outside it as pid 0. Each such connection is a process of its
// own: two connections never share keyrings or a session, and another
// uid's connection ends nobody else's.
func TestCallersOutsideThePIDNamespace(t *testing.T) {
	bin, socket := rootDir(t)
	d := startChild(t, socket, childOpts{attr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}})
	a, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// startChild's probe connection may still be on its way out.
	testutil.Eventually(t, "this connection to be the only process", func() bool {
		st, err := a.Status()
		return err == nil && strings.Contains(st, "processes: 1\n")
	})
	sess, err := a.JoinSessionKeyring(nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := a.AddKey("user", "mine", []byte("secret"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got, err := b.GetKeyringID(keys.SessionKeyring, false); err == nil && got == sess {
		t.Fatal("a second connection from outside the namespace shares the first one's session")
	}
	if _, err := b.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	// Another uid connects, looks, and leaves.
	victimServed(t, bin, socket)
	if got, err := a.GetKeyringID(keys.SessionKeyring, false); err != nil || got != sess {
		t.Fatalf("the first connection's session is now %d (%v), want %d", got, err, sess)
	}
	if v, err := a.Read(key); err != nil || string(v) != "secret" {
		t.Fatalf("the first connection's key: %q, %v", v, err)
	}
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("the daemon exited: %v", err)
	default:
	}
}
