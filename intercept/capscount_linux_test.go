package intercept_test

import (
	"os"
	"testing"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/wire"
)

// A caller's capabilities count while its call is pending, if it is in
// the daemon's user namespace, and never once the call is over: asked
// after the caller was killed, or by a handler that kept the Caller past
// its answer, CapsCount says no, as the thread its tid then names may be
// another's.
func TestCapsCountOnlyWhilePending(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a caller with capabilities in the test's user namespace")
	}
	for _, killed := range []bool{false, true} {
		cmd, ours, fd, out := startChild(t, "once")
		inCall, release := make(chan struct{}), make(chan struct{})
		var kept intercept.Caller
		var during bool
		l, err := intercept.NewListener(fd, intercept.HandlerFunc(func(c intercept.Caller, r *wire.Request) *wire.Response {
			if !killed {
				during = c.CapsCount()
			}
			close(inCall)
			<-release
			kept = c
			return &wire.Response{Ints: []int64{42}}
		}))
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- l.Serve() }()
		ours.Write([]byte{1})
		<-inCall
		if killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
		close(release)
		cmd.Wait()
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v\n%s", err, out)
		}
		l.Close()
		if !killed && !during {
			t.Error("a root caller in the daemon's user namespace: its capabilities did not count during its call")
		}
		if kept.CapsCount() {
			t.Errorf("killed %v: its capabilities counted once its call was over", killed)
		}
	}
}
