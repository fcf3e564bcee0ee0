package server

import (
	"context"
	"crypto/elliptic"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }

func (f *fakeClock) advance(d time.Duration) { f.mu.Lock(); f.t = f.t.Add(d); f.mu.Unlock() }

// serveSpinning serves a fresh service whose connections poll for up to
// spin, with the budgets of polling on clk.
func serveSpinning(t *testing.T, spin time.Duration, clk *fakeClock) (*Server, string) {
	t.Helper()
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two processors: the daemon never polls on one (sock.SetSpin)")
	}
	svc := keys.New()
	s := New(svc, Config{Spin: spin})
	s.spinNow = clk.now // before Serve: the connections read it
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
		svc.Close()
	})
	return s, path
}

// spinCharged is what the connections charged to uid have polled.
func spinCharged(s *Server, uid uint32) time.Duration {
	s.mu.Lock()
	u := s.usage.byUID[uid]
	s.mu.Unlock()
	if u == nil || u.spin == nil {
		return 0
	}
	u.spin.mu.Lock()
	defer u.spin.mu.Unlock()
	return u.spin.charged
}

var cheapCall = wire.Request{Op: wire.OpGetKeyringID, Ints: []int64{int64(keys.UserKeyring), 1}}

// A client that asks for it has the daemon poll for its next request;
// a uid's connections together poll at most its budget: a quarter of
// the time that passes. Here the daemon's clock of budgets moves 4 ms
// while two connections of one uid, each asking the daemon to poll up
// to 50 ms, take turns: together they are granted at most 1 ms. Before
// the cap, the daemon polled for each as long as it asked.
func TestSpinCappedPerUID(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s, path := serveSpinning(t, 50*time.Millisecond, clk)
	a, b := dialRaw(t, path), dialRaw(t, path) // version 3: both poll
	call(t, a, &cheapCall)
	clk.advance(4 * time.Millisecond)
	const budget = 4 * time.Millisecond / spinShare
	for range 200 {
		for _, c := range []net.Conn{a, b} {
			if r := call(t, c, &cheapCall); r.Errno != 0 {
				t.Fatalf("errno %d", r.Errno)
			}
		}
	}
	if got := spinCharged(s, 0); got > budget || got <= 0 {
		t.Fatalf("two connections of one uid were polled for %v; want some, and at most the uid's budget, %v", got, budget)
	}
}

// The daemon does not poll for one connection while another's request
// is being served: here one held in the bound of expensive operations,
// which a hook keeps there. Every poll asked meanwhile is refused or cut
// short, and none is charged.
func TestSpinStopsWhileOthersAreServed(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s, path := serveSpinning(t, 50*time.Millisecond, clk)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	SetExpensiveHook(s, func(uid uint32, start bool) {
		if start {
			once.Do(func() { close(entered); <-release })
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	spinner, other := dialRaw(t, path), dialRaw(t, path)
	clk.advance(time.Second) // a full budget
	cert := certtest.New(t, certtest.Options{CN: "held", Curve: elliptic.P256()}, nil)
	held := make(chan *wire.Response, 1)
	go func() {
		held <- call(t, other, &wire.Request{Op: wire.OpAddKey,
			Bufs: [][]byte{[]byte("asymmetric"), []byte(""), cert.DER}, Ints: []int64{int64(keys.UserKeyring)}})
	}()
	<-entered
	before, cutBefore := spinCharged(s, 0), s.spinCut.Load()
	for range 100 {
		if r := call(t, spinner, &cheapCall); r.Errno != 0 {
			t.Fatalf("errno %d", r.Errno)
		}
	}
	polled, cut := spinCharged(s, 0)-before, s.spinCut.Load()-cutBefore
	close(release)
	if r := <-held; r.Errno != 0 {
		t.Fatalf("the held add_key: errno %d", r.Errno)
	}
	if polled != 0 || cut == 0 {
		t.Fatalf("while another connection's request was served, the daemon polled %v for one connection (%d polls refused or cut); want none polled", polled, cut)
	}
}
