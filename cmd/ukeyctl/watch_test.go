package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// watchKey runs `keyctl watch args…` in the background and returns once
// the watch is in place; wait returns what it printed.
func watchKey(t *testing.T, args ...string) (wait func() result) {
	t.Helper()
	ready := make(chan struct{})
	watchReadyHook = func() { close(ready) }
	done := make(chan result, 1)
	go func() { done <- run("keyctl", "", append([]string{"watch"}, args...)...) }()
	select {
	case <-ready:
	case r := <-done:
		t.Fatalf("watch ended early: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("watch never started")
	}
	return func() result {
		defer func() { watchReadyHook = nil }()
		select {
		case r := <-done:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not end when its key went")
			return result{}
		}
	}
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	r := run("keyctl", "", args...)
	if r.Code != 0 {
		t.Fatalf("keyctl %v: %+v", args, r)
	}
	return strings.TrimSpace(r.Stdout)
}

func TestWatch(t *testing.T) {
	d := startDaemon(t)
	d.shell(t)
	key := mustRun(t, "add", "user", "w", "1", "@s")
	ring := mustRun(t, "newring", "r", "@s")
	wait := watchKey(t, key)
	mustRun(t, "update", key, "2")
	mustRun(t, "setperm", key, "0x3f010000")
	mustRun(t, "link", key, ring)
	mustRun(t, "revoke", key)
	mustRun(t, "unlink", key, "@s")
	mustRun(t, "unlink", key, ring)
	r := wait()
	want := fmt.Sprintf("%s upd\n%s attr\n%s rev\n%s gc\n", key, key, key, key)
	if r.Code != 0 || r.Stdout != want || r.Stderr != "" {
		t.Fatalf("watch printed %q %q (exit %d), want %q", r.Stdout, r.Stderr, r.Code, want)
	}
}

// A keyring's watch reports links, unlinks and clears; -f keeps only the
// chosen kinds (the removal record always comes through).
func TestWatchKeyringFiltered(t *testing.T) {
	d := startDaemon(t)
	d.shell(t)
	ring := mustRun(t, "newring", "r", "@s")
	wait := watchKey(t, "-fln", ring)
	k := mustRun(t, "add", "user", "a", "1", ring)
	mustRun(t, "setperm", ring, "0x3f010000")
	mustRun(t, "unlink", k, ring)
	mustRun(t, "clear", ring)
	mustRun(t, "unlink", ring, "@s")
	r := wait()
	want := fmt.Sprintf("%s link %s\n%s unlk %s\n%s gc\n", ring, k, ring, k, ring)
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("watch -fln printed %q (exit %d), want %q", r.Stdout, r.Code, want)
	}
}

func TestWatchErrors(t *testing.T) {
	startDaemon(t)
	r := run("keyctl", "", "watch", "12345")
	if r.Code != 1 || r.Stderr != "keyctl_watch_key: Required key not available\n" {
		t.Fatalf("watch of a missing key: %+v", r)
	}
}

// watch_session watches a new session keyring, runs a program that adds
// and removes watches with watch_add and watch_rm, and logs the events.
func TestWatchSession(t *testing.T) {
	startDaemon(t)
	bin := binDir(t, "keyctl")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	dir := t.TempDir()
	logf, gcf := filepath.Join(dir, "log"), filepath.Join(dir, "gc")
	script := `set -e
a=$(keyctl add user a 1 @s)
r=$(keyctl newring r @s)
keyctl watch_add $KEYCTL_WATCH_FD $r
b=$(keyctl add user b 2 $r)
keyctl watch_sync $KEYCTL_WATCH_FD
echo $a $r $b
keyctl watch_rm $KEYCTL_WATCH_FD $r
keyctl watch_rm $KEYCTL_WATCH_FD $r || true
keyctl watch_add 1 $r || true
`
	r := run("keyctl", "", "watch_session", logf, gcf, "5", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("watch_session: %+v", r)
	}
	m := regexp.MustCompile(`^Joined session keyring: (\d+)\n`).FindStringSubmatch(r.Stderr)
	if m == nil {
		t.Fatalf("watch_session stderr: %q", r.Stderr)
	}
	ses := m[1]
	ids := strings.Fields(r.Stdout)
	if len(ids) != 3 {
		t.Fatalf("script printed %q", r.Stdout)
	}
	a, ring, b := ids[0], ids[1], ids[2]
	wantErr := "keyctl_watch_key: Invalid slot\nkeyctl_watch_key: Invalid argument\n"
	if got := strings.TrimPrefix(r.Stderr, m[0]); got != wantErr {
		t.Errorf("script stderr %q, want %q", got, wantErr)
	}
	log, _ := os.ReadFile(logf)
	wantLog := fmt.Sprintf("%s link %s\n%s link %s\n%s link %s\nMonitoring terminated\n", ses, a, ses, ring, ring, b)
	if string(log) != wantLog {
		t.Errorf("log %q, want %q", log, wantLog)
	}
	gc, _ := os.ReadFile(gcf)
	wantGC := fmt.Sprintf("%s gc\nMonitoring terminated\n", ring)
	if string(gc) != wantGC {
		t.Errorf("gc log %q, want %q", gc, wantGC)
	}
}

// Under watch_session, the records of keys watched on one queue come in
// the order the daemon posted them, as from one kernel notification
// pipe: a move logs the source's unlink before the destination's link,
// whichever keyring is the session's and whichever serial is smaller, and
// a forced move logs nothing for the key it displaces (keyutils'
// move_key checks the last two lines so).
func TestWatchSessionMoveOrder(t *testing.T) {
	startDaemon(t)
	bin := binDir(t, "keyctl")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	dir := t.TempDir()
	logf, gcf := filepath.Join(dir, "log"), filepath.Join(dir, "gc")
	script := `set -e
r=$(keyctl newring r @s)
keyctl watch_add $KEYCTL_WATCH_FD $r
k=$(keyctl add user k 1 $r)
d=$(keyctl add user k 2 @s)
keyctl move -f $k $r @s
for i in 1 2 3 4 5 6 7 8; do
	keyctl move $k @s $r
	keyctl move $k $r @s
done
keyctl watch_sync $KEYCTL_WATCH_FD
echo $r $k $d
`
	r := run("keyctl", "", "watch_session", logf, gcf, "5", "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("watch_session: %+v", r)
	}
	m := regexp.MustCompile(`^Joined session keyring: (\d+)\n`).FindStringSubmatch(r.Stderr)
	ids := strings.Fields(r.Stdout)
	if m == nil || len(ids) != 3 {
		t.Fatalf("watch_session printed %q, %q", r.Stdout, r.Stderr)
	}
	ses, ring, k, d := m[1], ids[0], ids[1], ids[2]
	var want strings.Builder
	fmt.Fprintf(&want, "%s link %s\n%s link %s\n%s link %s\n", ses, ring, ring, k, ses, d)
	fmt.Fprintf(&want, "%s unlk %s\n%s link %s\n", ring, k, ses, k) // d displaced: no record
	for range 8 {
		fmt.Fprintf(&want, "%s unlk %s\n%s link %s\n", ses, k, ring, k)
		fmt.Fprintf(&want, "%s unlk %s\n%s link %s\n", ring, k, ses, k)
	}
	want.WriteString("Monitoring terminated\n")
	if log, _ := os.ReadFile(logf); string(log) != want.String() {
		t.Errorf("log:\n%s\nwant:\n%s", log, want.String())
	}
}
