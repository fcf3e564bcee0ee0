package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
)

// A session token that outlived its daemon (the daemon restarted) must
// not quietly become a fresh session: a key added to @s would be lost
// with it. The command fails with the kernel's EKEYREVOKED for a revoked
// session keyring and says why; a new session works at once.
func TestSessionLostAfterRestart(t *testing.T) {
	first := startDaemon(t)
	sh := first.shell(t)
	tok, err := sh.SessionToken()
	if err != nil {
		t.Fatal(err)
	}
	ses, err := sh.GetKeyringID(-3, false)
	if err != nil {
		t.Fatal(err)
	}
	second := startDaemon(t) // the restarted daemon: a new socket, no sessions
	t.Setenv(client.SessionEnv, fmt.Sprintf("%d:%s", ses, tok))

	r := run("ukeyctl", "", "add", "user", "k", "v", "@s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "add_key: Key has been revoked") || !strings.Contains(r.Stderr, "UKEYS_SESSION is gone") {
		t.Fatalf("add to @s in a lost session: exit %d\nstdout %q\nstderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if r := run("ukeyctl", "", "add", "user", "k", "v", "@u"); r.Code != 0 {
		t.Fatalf("add to @u in a lost session: exit %d %q", r.Code, r.Stderr)
	}
	// Joining a new session replaces the revoked keyring, as in the
	// kernel.
	c, err := client.Dial(second.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.SessionLost() == nil {
		t.Fatal("Dial with a dead session token reports no lost session")
	}
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddKey("user", "k", []byte("v"), -3); err != nil {
		t.Fatalf("add to a new session after a lost one: %v", err)
	}
}
