package agent

import (
	"sync"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// commons are what the agent's key namespaces share rather than each
// making its own: one rcu domain for their grace periods and one
// workqueue for their collectors. Each a namespace's own would cost it
// five goroutines and some 350 KiB of histograms, idle, which a node of
// hundreds of pods pays hundreds of times. They are made with the first
// namespace and closed with the last, so that an agent that holds none
// has none of their goroutines.
//
// A grace period then waits for the readers of every namespace, as the
// daemon's own service's waits for every host user's, and the
// collectors' work items take turns on one worker, each bounded by its
// chunk.
type commons struct {
	mu  sync.Mutex
	n   int // namespaces holding them
	dom *rcu.Domain
	gcq *workqueue.Queue
}

// acquire returns the options that make a namespace's keys.Service use
// the commons, made now if no namespace holds them, and release, which
// lets go of them (once, however often it is called) after the Service
// is closed.
func (c *commons) acquire() (opts []keys.Option, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.dom = rcu.New(rcu.WithName("agent-keys"))
		c.gcq = workqueue.New(c.dom, workqueue.WithName("agent-keys-gc"), workqueue.WithWorkers(1))
	}
	c.n++
	return []keys.Option{keys.WithDomain(c.dom), keys.WithGCQueue(c.gcq)}, sync.OnceFunc(c.release)
}

func (c *commons) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n > 0 {
		return
	}
	c.gcq.Close()
	c.dom.Close()
	c.gcq, c.dom = nil, nil
}
