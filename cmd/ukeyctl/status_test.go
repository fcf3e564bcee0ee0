package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// `ukeyctl status` shows the seccomp agent's namespaces the daemon lists
// as a table under their count, each with its kind, id, what it holds
// and its containers; a status without them is shown as it came.
func TestStatusListsNamespaces(t *testing.T) {
	nss := []wire.NamespaceStatus{
		{Kind: "pod", ID: "5f3a1c", Containers: []string{"app", "sidecar"}, Keys: 3, Bytes: 120, Processes: 2, Calls: 100, Refusals: 1},
		{Kind: "container", ID: "web", Containers: []string{"web"}, Keys: 1, Bytes: 16, Processes: 1, Calls: 12},
	}
	dir := t.TempDir()
	d := &daemon{dir: dir, path: filepath.Join(dir, "ukeyd.sock"), done: make(chan error, 1)}
	d.start(t, ukeystest.WithConfig(server.Config{ReadTimeout: time.Minute, Namespaces: func() []wire.NamespaceStatus { return nss }}))
	r := run("ukeyctl", "", "status")
	if r.Code != 0 {
		t.Fatalf("ukeyctl status: %d %s", r.Code, r.Stderr)
	}
	want := "namespaces: 2\n" +
		"  KIND       ID      KEYS  BYTES  PROCESSES  CALLS  REFUSALS  CONTAINERS\n" +
		"  pod        5f3a1c  3     120    2          100    1         app,sidecar\n" +
		"  container  web     1     16     1          12     0         web\n"
	if !strings.HasSuffix(r.Stdout, want) || strings.Contains(r.Stdout, "namespace: ") || !strings.HasPrefix(r.Stdout, "socket: ") {
		t.Errorf("ukeyctl status said\n%s\nwant it to end with\n%s", r.Stdout, want)
	}
	plain := "scope: user\npid: 1\n"
	if got := statusText(plain); got != plain {
		t.Errorf("a status without namespaces shown as %q", got)
	}
	none := plain + "namespaces: 0\n"
	if got := statusText(none); got != none {
		t.Errorf("a status of no namespaces shown as %q", got)
	}
}
