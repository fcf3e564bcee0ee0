package keys

import (
	"sync"
	"sync/atomic"
	"time"
)

// now is the service's time in unix nanoseconds, for expiry.
func (s *Service) now() int64 {
	if s.clock != nil {
		return s.clock().UnixNano()
	}
	return s.coarse.read()
}

// coarseClock is the service's clock unless WithClock replaces it: like
// the kernel's ktime_get_real_seconds, which key expiry uses, it is read
// from a cached value that a ticker refreshes, because a real clock read
// costs tens of nanoseconds on virtual machines and a key lookup needs
// several. The value lags real time by at most about two ticks. It
// follows the monotonic clock from the wall time at the first read, so a
// step of the wall clock does not shorten or lengthen timeouts. The
// ticker runs only while the clock is being read: after a tick with no
// reader it stops, and the next read restarts it.
type coarseClock struct {
	now     atomic.Int64 // unix nanoseconds, valid while running
	wanted  atomic.Bool  // read since the last tick
	running atomic.Bool

	mu      sync.Mutex
	base    time.Time // wall and monotonic reading of the first start
	closed  bool
	stop    chan struct{}
	stopped chan struct{}
}

// coarseTick is how often a running coarse clock is refreshed.
const coarseTick = time.Millisecond

func (c *coarseClock) read() int64 {
	if c.running.Load() {
		if !c.wanted.Load() {
			c.wanted.Store(true)
		}
		return c.now.Load()
	}
	return c.start()
}

// precise reads the underlying clock. Called with mu held.
func (c *coarseClock) precise() int64 {
	if c.base.IsZero() {
		c.base = time.Now()
	}
	return c.base.UnixNano() + int64(time.Since(c.base))
}

func (c *coarseClock) start() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.precise()
	if c.closed {
		return now
	}
	if now > c.now.Load() {
		c.now.Store(now)
	}
	c.wanted.Store(true)
	if !c.running.Load() {
		if c.stopped != nil {
			<-c.stopped // the previous ticker has decided to exit
		}
		c.stop, c.stopped = make(chan struct{}), make(chan struct{})
		c.running.Store(true)
		go c.tick(c.stop, c.stopped)
	}
	return c.now.Load()
}

func (c *coarseClock) tick(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		if !c.wanted.Swap(false) || c.closed {
			c.running.Store(false)
			c.mu.Unlock()
			return
		}
		c.now.Store(c.precise())
		c.mu.Unlock()
	}
}

// close stops the ticker for good; later reads use the clock directly.
func (c *coarseClock) close() {
	c.mu.Lock()
	c.closed = true
	running, stop, stopped := c.running.Load(), c.stop, c.stopped
	c.running.Store(false)
	c.mu.Unlock()
	if running {
		close(stop)
	}
	if stopped != nil {
		<-stopped
	}
}
