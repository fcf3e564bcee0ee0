package hardening

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// status returns the daemon's "name: value" status line for name.
func (d *daemon) status(t testing.TB, name string) string {
	t.Helper()
	c := d.dial(t)
	defer c.Close()
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(st, "\n") {
		if v, ok := strings.CutPrefix(l, name+": "); ok {
			return v
		}
	}
	return ""
}

// helpersRunning counts processes running this binary as a helper.
func helpersRunning() int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(helperArg)) {
			n++
		}
	}
	return n
}

// quiet waits until nothing is left in flight: no connection but the
// probe's, no key under construction, no helper running; then checks the
// keys invariants.
func (d *daemon) quiet(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, "the clients' connections to close", func() bool { return d.status(t, "connections") == "1" })
	testutil.Eventually(t, "constructions to end", func() bool { return len(d.svc.Uninstantiated()) == 0 })
	testutil.Eventually(t, "helpers to be gone", func() bool { return helpersRunning() == 0 })
	d.settle(t)
}

// Clients killed in the middle of every kind of operation, including
// while a key they requested is being constructed: afterwards no quota is
// leaked, no key stays uninstantiated, no connection or goroutine is left.
func TestKilledClients(t *testing.T) {
	agentBinary(t)
	victim := asGroup
	if os.Geteuid() != 0 {
		victim = who{"self", uint32(os.Getuid()), uint32(os.Getgid()), nil}
	}
	// Quotas large enough that the loops do not stop each other.
	tun := keys.DefaultTunables()
	tun.MaxKeys, tun.MaxBytes = 1000000, 100000000
	d := startDaemon(t, daemonConfig{
		helper:   helperCmd("hang"),
		opts:     []keys.Option{keys.WithUpcallTimeout(time.Second)},
		tunables: &tun,
	})
	d.quiet(t)
	goroutines := runtime.NumGoroutine()
	keys0, bytes0 := d.svc.QuotaUsage(victim.uid)

	s := int64(keys.SessionKeyring)
	loops := map[string][]call{
		"add, read, search, update, link, unlink": {
			{Op: "add", A: s, S: "user", T: "k{round}", P: []byte("payload")},
			{Op: "read", A: usePrev}, {Op: "describe", A: usePrev},
			{Op: "search", A: s, S: "user", T: "k{round}"},
			{Op: "update", A: usePrev, P: []byte("payload2")},
			{Op: "link", A: usePrev, B: int64(keys.ProcessKeyring)},
			{Op: "unlink", A: usePrev, B: s},
		},
		"keyrings: nest, clear, revoke": {
			{Op: "add", A: s, S: "keyring", T: "r{round}"},
			{Op: "add", A: usePrev, S: "user", T: "c", P: []byte("c")},
			{Op: "clear", A: usePrev}, {Op: "revoke", A: usePrev},
		},
		"attributes: timeout, setperm, chown, invalidate": {
			{Op: "add", A: s, S: "user", T: "t{round}", P: []byte("t")},
			{Op: "timeout", A: usePrev, B: 1},
			{Op: "setperm", A: usePrev, B: int64(keys.PermDefault)},
			{Op: "chown", A: usePrev, B: -1, C: -1},
			{Op: "invalidate", A: usePrev},
		},
		"sessions and watches": {
			{Op: "join", NilS: true}, {Op: "token"},
			{Op: "watch", A: s, B: 1},
			{Op: "add", A: s, S: "logon", T: "w:{round}", P: []byte("w")},
		},
		"big keys": {
			{Op: "add", A: s, S: "big_key", T: "b{round}", P: bytes.Repeat([]byte("b"), 5000)},
			{Op: "read", A: usePrev}, {Op: "unlink", A: usePrev, B: s},
		},
		"request-key under construction": {
			{Op: "request", A: s, S: "user", T: "rk{round}", P: []byte("callout")},
		},
	}
	var agents []*agent
	for name, seq := range loops {
		a := startAgent(t, d, victim)
		if r := a.one(call{Op: "join", NilS: true}); r.Errno != 0 {
			t.Fatalf("%s: %s", name, r.Err)
		}
		a.send(call{Op: "loop", Seq: seq})
		agents = append(agents, a)
	}
	// Let every loop get going (the request-key one into construction),
	// then kill them one after another.
	testutil.Eventually(t, "a construction in flight", func() bool { return len(d.svc.Uninstantiated()) > 0 })
	for _, a := range agents {
		time.Sleep(20 * time.Millisecond)
		a.kill()
	}
	for _, a := range agents {
		a.stop()
	}
	d.quiet(t)
	// Only the uid's user and user-session keyrings may remain (Check has
	// verified that the quota records match the live keys). The upcall of
	// the killed requester may still be returning (its helper is reaped
	// after its key was negated and its connection closed), and it holds
	// the requester's keyrings until it has: wait for it, within limits.
	deadline := time.Now().Add(5 * time.Second)
	for k, _ := d.svc.QuotaUsage(victim.uid); k > max(keys0, 2) && time.Now().Before(deadline); k, _ = d.svc.QuotaUsage(victim.uid) {
		time.Sleep(10 * time.Millisecond)
		d.settle(t)
	}
	if k, b := d.svc.QuotaUsage(victim.uid); k > max(keys0, 2) {
		as := d.svc.NewCaller(keys.Cred{UID: victim.uid, GID: victim.gid, PID: 1})
		defer as.Release()
		t.Fatalf("quota leaked: %d keys, %d bytes (before: %d, %d); the uid's keys:\n%s\n%s", k, b, keys0, bytes0, as.ProcKeys(), d.svc.ProcKeyUsers())
	}
	testutil.Eventually(t, "the daemon's goroutines to return to their number before", func() bool {
		return runtime.NumGoroutine() <= goroutines
	})
	if d.status(t, "processes") != "1" {
		t.Fatalf("processes left: %s", d.status(t, "processes"))
	}
}

// The request-key helper crashing, hanging, printing garbage, abusing the
// protocol or missing: the requester gets an error, the key ends negative
// (never uninstantiated), the helper's processes are gone, and the daemon
// serves on.
func TestMisbehavingHelpers(t *testing.T) {
	agentBinary(t)
	// Helpers that hang meet a short upcall timeout; the others a long one,
	// so that a slow start of the helper on a busy machine is not taken
	// for a hang.
	const short, long = 700 * time.Millisecond, time.Minute
	cases := []struct {
		name    string
		helper  []string
		timeout time.Duration
		ok      bool
	}{
		{"well-behaved", helperCmd("instantiate"), long, true},
		{"crashes", helperCmd("crash"), long, false},
		{"hangs past the timeout", helperCmd("hang"), short, false},
		{"abuses its authority and the protocol", helperCmd("garbage"), long, false},
		{"prints garbage and exits 0", []string{"/bin/sh", "-c", "head -c 4096 /dev/urandom; echo; exit 0", "sh"}, long, false},
		{"hangs in a child of its own", []string{"/bin/sh", "-c", "sleep 3600 & wait", "sh"}, short, false},
		{"is killed by a signal", []string{"/bin/sh", "-c", "kill -SEGV $$", "sh"}, long, false},
		{"does not exist", []string{"/nonexistent/request-key"}, long, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := startDaemon(t, daemonConfig{helper: tc.helper, opts: []keys.Option{keys.WithUpcallTimeout(tc.timeout)}})
			c := d.dial(t)
			if _, err := c.JoinSessionKeyring(nil); err != nil {
				t.Fatal(err)
			}
			id, err := c.RequestKey("user", "wanted", []byte("callout"), keys.SessionKeyring)
			if tc.ok {
				if err != nil {
					t.Fatalf("request: %v", err)
				}
				if b, err := c.Read(id); err != nil || string(b) != "constructed" {
					t.Fatalf("read: %q %v", b, err)
				}
			} else {
				if err == nil {
					t.Fatalf("request succeeded with key %d", id)
				}
				// The key is negative now: a second request fails at once.
				if _, err2 := c.RequestKey("user", "wanted", []byte("callout"), keys.SessionKeyring); err2 == nil {
					t.Fatal("second request succeeded")
				}
			}
			pk, _ := c.ProcKeys()
			for _, l := range strings.Split(pk, "\n") {
				if f := strings.Fields(l); len(f) > 8 && strings.HasPrefix(f[8], "wanted") && f[1][0] != 'I' {
					t.Fatalf("the requested key is not instantiated (positive or negative): %s", l)
				}
			}
			testutil.Eventually(t, "the helper's processes to be gone", func() bool {
				return helpersRunning() == 0 && !sleepersOf(tc.helper)
			})
			if _, err := c.AddKey("user", "after", []byte("x"), keys.SessionKeyring); err != nil {
				t.Fatalf("the daemon after the helper: %v", err)
			}
			c.Close()
			d.quiet(t)
		})
	}
}

// sleepersOf reports whether a "sleep 3600" started by a shell helper is
// still running.
func sleepersOf(helper []string) bool {
	if !strings.Contains(fmt.Sprint(helper), "sleep 3600") {
		return false
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Equal(b, []byte("sleep\x003600\x00")) {
			return true
		}
	}
	return false
}
