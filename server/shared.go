package server

import "sync"

// Slots bound how many expensive operations (signature checks,
// dh_compute, pkey_*) run at once over every [Server] given them
// ([Config.Expensive]). They exist for the seccomp agent, which gives each
// container's Server the daemon's own: with a bound of each Server's,
// a hundred containers would run a hundred checks at once on two
// processors, and the processors the daemon leaves free would not stay
// free.
type Slots struct{ c chan struct{} }

// NewSlots returns n slots (at least one).
func NewSlots(n int) *Slots { return &Slots{c: make(chan struct{}, max(n, 1))} }

// A Pool bounds what several Servers keep together of processes and
// listeners (a descriptor or more each; [Config.Pool]), besides each
// one's own [Limits].MaxProcs. It exists for the seccomp agent, whose
// containers' Servers together may keep only the containers' share of
// the daemon's descriptors, however many containers there are. A nil
// Pool bounds nothing.
type Pool struct {
	mu     sync.Mutex
	n, max int
}

// NewPool returns a pool that lets its Servers keep max processes and
// listeners together.
func NewPool(max int) *Pool { return &Pool{max: max} }

// take counts one more in p, unless p is full.
func (p *Pool) take() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= p.max {
		return false
	}
	p.n++
	return true
}

// takeAnyway counts one more in p, past its bound if need be: one that
// was counted before a hand-over.
func (p *Pool) takeAnyway() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

// give undoes take.
func (p *Pool) give() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.n--
	p.mu.Unlock()
}
