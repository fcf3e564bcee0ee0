package server

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The daemon follows forks while it keeps a process, and gives the
// connector up a while after it keeps none: a process that connects
// makes it subscribe again before the process is kept, and its exit lets
// it go idle again. An idle daemon costs the host's forks nothing.
func TestForksFollowedWhileProcessesKept(t *testing.T) {
	saved := forksIdleAfter
	forksIdleAfter = 200 * time.Millisecond
	defer func() { forksIdleAfter = saved }()
	s, path := serveTemp(t, Config{})
	state := func() (able, subscribed bool, subs, procs int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.procs.forks.able, s.procs.forks.file != nil, s.procs.forks.subs, len(s.procs.byPID)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				able, sub, subs, procs := state()
				t.Fatalf("%s: able %v, subscribed %v, %d subscriptions, %d processes kept", what, able, sub, subs, procs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Serve probes the connector first.
	time.Sleep(100 * time.Millisecond)
	if able, _, subs, _ := state(); !able {
		if subs != 0 {
			t.Fatal("subscribed although the connector is not to be had")
		}
		t.Skip("no process events connector here (not root, or not the host's namespaces)")
	}
	waitFor("idle after the probe", func() bool { _, sub, subs, _ := state(); return !sub && subs == 1 })
	if !s.Stats().FollowsForks {
		t.Fatal("Stats says forks are not followed while the daemon is idle: it would follow them")
	}

	// A process connects and exits at once.
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"UKEYS_TEST_CHILD=connect", "UKEYS_SOCKET=" + path}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the connecting child: %v: %s", err, out)
	}
	waitFor("subscribed again for the process", func() bool { _, _, subs, _ := state(); return subs == 2 })
	waitFor("idle again once it has gone", func() bool { _, sub, _, procs := state(); return !sub && procs == 0 })
}
