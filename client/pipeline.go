package client

import (
	"encoding/binary"
	"io"
	"sync"
	"time"

	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/wire"
)

// Option configures [Dial].
type Option func(*dialConfig)

type dialConfig struct {
	pipelined bool
	blocking  bool
	deferred  bool
	spin      time.Duration
}

// WithSpin makes a call poll for its answer for up to d before its
// thread sleeps, once an answer has come within d, and asks the daemon
// to poll the same way for the next request (protocol version 3): a
// program calling in a tight loop then costs neither end a sleep and a
// wake-up per call. A single call, or one whose answer takes longer,
// costs nothing more; a daemon that does not poll (one that speaks
// version 2) is not polled for either. Not with [WithPipelining], and not
// on a single processor.
func WithSpin(d time.Duration) Option { return func(c *dialConfig) { c.spin = d } }

// DefaultSpin is the poll ukeyctl asks for, the daemon's own default.
const DefaultSpin = sock.DefaultSpin

// WithBlockingIO keeps the socket blocking: a call waits for its answer in
// the read system call, on its own thread, instead of parking on the
// runtime's poller and being woken by it. That saves the poller's hand-offs
// on every round trip, which is most of what a short-lived program (ukeyctl,
// a process per command) spends talking to the daemon, at the cost of a
// thread held for as long as an answer takes. It is for a program that calls
// from one goroutine at a time, and excludes [WithPipelining].
// [Client.Close] does not interrupt a call in progress.
func WithBlockingIO() Option { return func(c *dialConfig) { c.blocking = true } }

// WithDeferredHandshake saves a short-lived program a round trip: [Dial]
// connects and checks the daemon's credentials but writes nothing, and the
// hello (with the session token, if any) goes out with the first call's
// request, in one write. A refusal, or a daemon that does not answer the
// hello, is then reported by the first call (a *[HandshakeError]) instead of
// by Dial, and [Client.SessionLost] says whether the session was joined only
// once the first call has returned. A request-key helper's token is never
// deferred. It has no effect with [WithPipelining].
func WithDeferredHandshake() Option { return func(c *dialConfig) { c.deferred = true } }

// WithPipelining makes the client send requests from concurrent goroutines
// without waiting for each other's answers: requests that meet go out in
// one write, the daemon serves them in order and answers them in one
// write, and each caller gets its own answer. A program that shares one
// client among many goroutines then gets the daemon's throughput instead
// of one round trip at a time; a program that calls from one goroutine at
// a time is better served without it (its round trip is a system call
// shorter).
//
// The daemon serves a connection's requests in order, so a request that
// waits ([Client.RequestKey] while a helper constructs the key,
// [Client.NextNotification]) holds up the ones sent after it: give those a
// client of their own.
func WithPipelining() Option { return func(c *dialConfig) { c.pipelined = true } }

// pipeline is a connection shared by concurrent callers: they append their
// frames to pending, the first to find nobody writing writes for everyone,
// and one reader goroutine hands each answer to its caller by tag.
type pipeline struct {
	sc *sock.Conn // its In is the reader's; its Out is not used

	mu      sync.Mutex
	calls   map[uint32]*call // in flight, by tag
	tag     uint32
	pending sock.Frames // frames not yet written
	spare   sock.Frames // the writer's other buffer
	writing bool        // a caller is writing pending
	err     error       // the connection's failure: every later call gets it

	done chan struct{} // closed when the reader has stopped
}

// call is one request in flight.
type call struct {
	ch   chan struct{} // signalled once, when body or err is set
	body []byte        // the answer's body: the caller's own copy
	err  error
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan struct{}, 1)} }}

func newPipeline(sc *sock.Conn) *pipeline {
	p := &pipeline{sc: sc, calls: map[uint32]*call{}, done: make(chan struct{})}
	go p.read()
	return p
}

// read hands every answer to the call with its tag, until the connection
// fails or closes.
func (p *pipeline) read() {
	defer close(p.done)
	in := p.sc.In
	defer in.Release()
	for {
		body, err := in.Next()
		if err != nil {
			p.fail(err)
			return
		}
		if len(body) < 4 {
			p.fail(ErrProtocol)
			return
		}
		tag := binary.BigEndian.Uint32(body)
		p.mu.Lock()
		cl := p.calls[tag]
		delete(p.calls, tag)
		p.mu.Unlock()
		if cl == nil {
			p.fail(ErrProtocol) // an answer nobody asked for
			return
		}
		cl.body = append(cl.body[:0], body...)
		in.Done() // answers may carry payloads
		cl.ch <- struct{}{}
	}
}

// fail ends the pipeline: every call in flight, and every later one, gets
// err.
func (p *pipeline) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		p.err = err
	}
	calls := p.calls
	p.calls = map[uint32]*call{}
	p.pending.Reset()
	p.mu.Unlock()
	for _, cl := range calls {
		cl.err = p.err
		cl.ch <- struct{}{}
	}
	p.sc.Stream().Close()
}

// close closes the connection and waits for the reader to stop.
func (p *pipeline) close() error {
	err := p.sc.Stream().Close()
	<-p.done
	return err
}

// do sends req (its tag is set here) and returns the answer's body, which
// the caller owns, and the call to give back with release.
func (p *pipeline) do(req *wire.Request) (*call, error) {
	cl := callPool.Get().(*call)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		callPool.Put(cl)
		return nil, err
	}
	p.tag++
	req.Tag = p.tag
	if err := p.pending.Request(req); err != nil {
		p.mu.Unlock()
		callPool.Put(cl)
		return nil, err
	}
	p.calls[req.Tag] = cl
	write := !p.writing
	p.writing = true
	p.mu.Unlock()
	if write {
		p.flush()
	}
	<-cl.ch
	if cl.err != nil {
		err := cl.err
		p.release(cl)
		return nil, err
	}
	return cl, nil
}

// flush writes pending, and whatever others append meanwhile, until
// nothing is left: concurrent callers' frames go out together.
func (p *pipeline) flush() {
	for {
		p.mu.Lock()
		if p.pending.Len() == 0 || p.err != nil {
			p.writing = false
			p.mu.Unlock()
			return
		}
		out := p.pending
		p.pending, p.spare = p.spare, sock.Frames{}
		p.mu.Unlock()
		_, err := p.sc.Stream().Write(out.Bytes())
		out.Reset() // requests may carry payloads
		p.mu.Lock()
		p.spare = out
		p.mu.Unlock()
		if err != nil {
			p.fail(err)
			p.mu.Lock()
			p.writing = false
			p.mu.Unlock()
			return
		}
	}
}

// release wipes a call's answer and keeps the call for reuse.
func (p *pipeline) release(cl *call) {
	cl.body, cl.err = sock.Recycle(cl.body), nil
	callPool.Put(cl)
}
