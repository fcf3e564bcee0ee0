package client

import (
	"runtime"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// A client polls only if it asked to (WithSpin) and the daemon agreed to
// version 3, which makes the daemon poll too: polling alone would hold a
// processor the daemon's woken thread needs. It asks with version 3 and
// otherwise says 2 (1 when pipelining), so that a daemon polls only for
// a client that does.
func TestSpinNegotiated(t *testing.T) {
	const d = 100 * time.Microsecond
	polls := d
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		polls = 0 // SetSpin does nothing on one processor
	}
	for _, tc := range []struct {
		name      string
		opts      []Option
		daemon    uint16 // the highest version the fake daemon speaks
		wantHello uint16
		wantSpin  time.Duration
	}{
		{"without", []Option{WithBlockingIO(), WithDeferredHandshake()}, wire.Version, 2, 0},
		{"with", []Option{WithBlockingIO(), WithDeferredHandshake(), WithSpin(d)}, wire.Version, 3, polls},
		{"with, poller", []Option{WithSpin(d)}, wire.Version, 3, polls},
		{"with, an older daemon", []Option{WithBlockingIO(), WithSpin(d)}, 2, 3, 0},
		{"with, pipelining", []Option{WithPipelining(), WithSpin(d)}, wire.Version, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(SessionEnv, "")
			t.Setenv(HelperEnv, "")
			path, _, hello := fakeDaemonOf(t, tc.daemon, func(*wire.Request) *wire.Response {
				return &wire.Response{Ints: []int64{42}}
			})
			c, err := Dial(path, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if id, err := c.GetKeyringID(keyctl.SessionKeyring, false); err != nil || id != 42 {
				t.Fatalf("a call: %v %v", id, err)
			}
			if v := <-hello; v != tc.wantHello {
				t.Fatalf("the client said version %d, want %d", v, tc.wantHello)
			}
			if got := c.sc.Spin(); got != tc.wantSpin {
				t.Fatalf("the client polls %v, want %v", got, tc.wantSpin)
			}
		})
	}
}
