package server

import (
	"sync"
	"time"

	"github.com/ukeys/ukeys/internal/sock"
)

// A client that asks for it (protocol version 3, wire.Polls) has the
// daemon poll for its next request instead of sleeping (sock.SetSpin): a
// processor's time, given to whoever asks: unbounded, one connection
// sending a request every few tens of microseconds would keep the daemon
// polling a whole processor for it, at the cost of every other user's
// latency (TestSpinCappedPerUID, TestSpinStopsWhileOthersAreServed). So
// the poll is granted from a budget of the account the connection is
// charged to (chargeUID), shared by all its connections: a quarter of a
// processor, in bursts of at most spinBurst; and it is not granted, or is
// cut short, while another connection's request is being served.

// spinShare: an account's polls may take one nanosecond in spinShare of
// the time that passes.
const spinShare = 4

// spinBurst bounds what an account may have saved to poll with: twenty
// polls of the default length.
const spinBurst = 20 * sock.DefaultSpin

// spinAccount is an account's budget of polling time.
type spinAccount struct {
	mu      sync.Mutex
	tokens  time.Duration // what may be polled now
	at      time.Time     // when tokens was last refilled
	charged time.Duration // polled since the account was made (tests)
}

// take reserves up to want of the budget at now, and returns it.
func (a *spinAccount) take(now time.Time, want time.Duration) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	// An account starts with nothing saved (spinGateOf): one that closed
	// every connection and came back would otherwise have a burst anew.
	if now.After(a.at) {
		a.tokens = min(a.tokens+now.Sub(a.at)/spinShare, spinBurst)
		a.at = now
	}
	d := min(want, a.tokens)
	a.tokens -= d
	a.charged += d
	return d
}

// refund returns what was reserved and not polled.
func (a *spinAccount) refund(d time.Duration) {
	if d <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tokens = min(a.tokens+d, spinBurst)
	a.charged -= d
}

// spinGate is a connection's sock.SpinGate.
type spinGate struct {
	s    *Server
	acct *spinAccount
}

func (g *spinGate) Begin(want time.Duration) time.Duration {
	if g.s.serving.Load() > 0 {
		g.s.spinCut.Add(1)
		return 0
	}
	return g.acct.take(g.s.spinNow(), want)
}

func (g *spinGate) Continue() bool {
	if g.s.serving.Load() > 0 {
		g.s.spinCut.Add(1)
		return false
	}
	return true
}

func (g *spinGate) End(granted, spent time.Duration) { g.acct.refund(granted - spent) }

// spinGateOf returns the gate of a connection charged to account.
func (s *Server) spinGateOf(account uint32) *spinGate {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage.of(account)
	if u.spin == nil {
		u.spin = &spinAccount{at: s.spinNow()}
	}
	return &spinGate{s: s, acct: u.spin}
}
