package server_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func init() { testChildren["pwd-helper"] = pwdHelperChild }

// pwdHelperChild is a request-key helper (the kernel's arguments: create
// <key> ...) that instantiates the key with its working directory.
func pwdHelperChild() {
	wd, err := os.Getwd()
	if err != nil {
		wd = "getwd: " + err.Error()
	}
	key, _ := strconv.Atoi(os.Args[2])
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		os.Exit(1)
	}
	defer c.Close()
	if _, err := c.AssumeAuthority(keys.Serial(key)); err != nil {
		os.Exit(1)
	}
	if err := c.Instantiate(keys.Serial(key), []byte(wd), 0); err != nil {
		os.Exit(1)
	}
}

// The kernel starts /sbin/request-key in /; the daemon's helper starts
// there too, not in whatever directory the daemon was started from (the
// test's own, here).
func TestRequestKeyHelperRunsInRoot(t *testing.T) {
	if wd, _ := os.Getwd(); wd == "/" {
		t.Skip("the test runs in /: it could not tell the helper's directory from the daemon's")
	}
	var srv atomic.Pointer[server.Server]
	var sock atomic.Pointer[string]
	up := keys.UpcallFunc(func(ctx context.Context, u *keys.Upcall) error {
		h := server.Helper{Path: "/bin/sh", Args: []string{"-c", `UKEYS_TEST_CHILD=pwd-helper exec "$0" "$@"`, os.Args[0]}, Socket: *sock.Load()}
		return srv.Load().Upcaller(h).Upcall(ctx, u)
	})
	d := startDaemonCfg(t, server.Config{}, keys.WithUpcall(up), keys.WithUpcallTimeout(time.Minute))
	sock.Store(&d.path)
	srv.Store(d.srv)
	c := d.dial(t)
	id, err := c.RequestKey("user", "cwd", []byte("info"), 0)
	if err != nil {
		t.Fatalf("request_key: %v", err)
	}
	b, err := c.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "/" {
		t.Errorf("the request-key helper ran in %q, want / (as the kernel's)", b)
	}
}
