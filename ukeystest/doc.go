// Package ukeystest starts ukeys daemons for tests, as net/http/httptest
// starts HTTP servers: a [keys.Service] served by a [server.Server] on a
// Unix socket in a temporary directory, shut down when the test ends. A
// program that keeps its keys in ukeys (through package client, or by
// running ukeyctl against [Daemon.Socket]) tests against one of its own
// instead of the host's daemon.
//
// [NewDaemon] takes the test and options; it never panics, and it fails
// the test (t.Fatal) if the daemon cannot start. When the test ends its
// cleanup shuts the server down (with a timeout), checks that Serve
// returned [server.ErrClosed] and that the socket is gone, and closes
// the Service. [Daemon.Dial] connects a client that is closed before the
// daemon stops.
//
//	d := ukeystest.NewDaemon(t, ukeystest.WithKeys(keys.WithUpcallTimeout(time.Second)))
//	c := d.Dial(t)
//	id, err := c.AddKey("user", "k", []byte("v"), keys.SessionKeyring)
//
// Options choose the Service's options ([WithKeys], [WithTunables]), the
// server's configuration ([WithConfig]), a request-key helper program
// ([WithHelper]), and where the socket lives: in a fresh directory private
// to the test by default, in one with another mode when clients running
// as other uids must reach it ([WithDirMode]), or at a given path
// ([WithSocket]).
//
// Keys are owned by uids and checked against them, so a test of who may
// use a key runs clients as other users (with a daemon WithDirMode lets
// them reach). Three small helpers serve those tests: [NeedRoot] skips a
// test unless it runs as root, [As] gives a child process a uid, gid and
// supplementary groups of the test's choosing, and [CopyExecutable]
// copies the test binary where another uid can run it.
package ukeystest
