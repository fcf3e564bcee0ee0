package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// conn is one client's socket connection: the socket, its reader and
// writer, the state its serving goroutine shares with Shutdown and a
// hand-over, and the buffer space it holds beyond its allowance. Who
// calls through it is its caller, which serves its requests.
type conn struct {
	caller // who calls through the connection; its conn is this one
	uc     *net.UnixConn
	// charge is the uid the connection is counted against (chargeUID):
	// its admission and its buffers; see caller.account.
	charge uint32

	mu   sync.Mutex
	busy bool // a request is being served
	quit bool // close once the current request is answered
	// pausing: a hand-over is under way, and the connection is to stop
	// at the next request's boundary (handover.go); gone: it has been
	// handed over, and nothing of it is this daemon's any more. gone is
	// the serving goroutine's own.
	pausing atomic.Bool
	gone    bool

	sc     *sock.Conn  // the serving goroutine's own
	idleFn func() bool // c.idle, bound once: a method value per answer would allocate

	// Bytes charged to the uid for buffers larger than the allowance:
	// the request buffer and the answer buffer.
	reservedIn, reservedOut int
}

// newConn returns the connection uc of process p, accepted with
// credentials cred and counted against charge; its caller acts as p's.
func newConn(s *Server, uc *net.UnixConn, cred keys.Cred, p *proc, charge uint32) *conn {
	c := &conn{uc: uc, charge: charge}
	c.caller = caller{s: s, cred: cred, proc: p, kc: p.caller, conn: c}
	return c
}

// closeIdle closes the connection now if it is between requests, or
// after the request in flight is answered.
func (c *conn) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quit = true
	if !c.busy {
		c.uc.Close()
	}
	c.closeWatch() // wakes an OpWatchNext in flight
}

func (c *conn) serve() { c.run2(0, nil) }

// run2 serves the connection: from the handshake (version 0), or, for a
// connection handed over by the daemon before this one (takeover.go),
// from where that daemon left it: the version agreed and the bytes it
// had read and not yet served.
func (c *conn) run2(version uint16, unread []byte) {
	// A connection handed over to the daemon that takes over (park) is
	// not this daemon's any more: nothing of it is released or closed.
	defer func() {
		if c.gone {
			return
		}
		c.s.release(c)
	}()
	// Closing this daemon's descriptor of a connection handed over
	// leaves the socket to the daemon that took it: close is no shutdown.
	defer c.uc.Close()
	defer func() {
		if !c.gone {
			c.closeWatch()
		}
	}()
	// One reader per connection, whose buffer is wiped as each request is
	// answered: a frame's header and body then usually arrive in one read
	// system call, and no payload stays behind in it.
	sc, err := sock.New(c.uc, smallFrame)
	if err != nil {
		secmem.Free(unread)
		return
	}
	// Its frames carry payloads: they go into the arena (locked, never
	// dumped), and are freed when the connection ends, by the deferred
	// release below, whatever ends it.
	sc.InArena()
	c.sc, c.idleFn = sc, c.idle
	// One descriptor may come with a request: a seccomp listener
	// (OpIntercept). Any other, or one not claimed, is closed.
	sc.AcceptFDs(1)
	defer func() {
		// Under mu, as a reader of an idle connection's buffers holds it.
		c.mu.Lock()
		sc.Release()
		c.freeRead()
		sc.CloseFDs()
		c.mu.Unlock()
	}()
	defer func() {
		if !c.gone {
			c.unreserveAll()
		}
	}()
	sc.In.Preload(unread)
	secmem.Free(unread) // the arena's, from the hand-over (takeover.go)
	read := sock.Deadline{Timeout: c.s.cfg.ReadTimeout}
	c.renew(&read)
	for version == 0 {
		// Nothing longer than a Hello is read before the handshake.
		sc.In.SetLimit(wire.MaxHello)
		hello, err := sc.In.Next()
		if err != nil {
			if c.pausedBy(err) {
				if c.park(sc, 0) {
					return
				}
				read = sock.Deadline{Timeout: c.s.cfg.ReadTimeout}
				c.renew(&read)
				continue
			}
			return
		}
		v, err := wire.DecodeHello(hello)
		if err != nil || v < 1 {
			c.s.log.Debug("ukeyd: bad handshake", "uid", c.cred.UID, "pid", c.cred.PID)
			return
		}
		version = min(v, wire.Version)
		sc.Out.Body(wire.EncodeHello(version))
		sc.In.SetLimit(wire.MaxFrame)
		// A client that sent its first requests with its hello
		// (client.WithDeferredHandshake) gets the hello with their
		// answers, in one write (see the loop below): one wake-up for a
		// process that makes one call, instead of one per answer.
		if sc.In.WholeFrameBuffered() {
			break
		}
		if _, err := sc.Flush(); err != nil {
			return
		}
	}
	sc.In.SetLimit(wire.MaxFrame)
	// Only a client that sends one request at a time may be waited for
	// without reading (FlushAndWait): another may already have sent the
	// next.
	sequential := wire.Sequential(version)
	if wire.Polls(version) && c.s.cfg.Spin > 0 {
		sc.SetSpin(c.s.cfg.Spin)
		sc.SetSpinGate(c.s.spinGateOf(c.charge))
	}
	// The request is reused from one to the next: serving a request
	// allocates only what the keys package returns.
	var req wire.Request
	// pause parks the connection for a hand-over (handover.go) once err
	// (or nothing) says its read was cut short for one; it reports
	// whether to go on serving.
	pause := func(err error) (goOn bool) {
		if !c.pausedBy(err) {
			return false
		}
		if c.park(sc, version) {
			return false
		}
		read = sock.Deadline{Timeout: c.s.cfg.ReadTimeout}
		return true
	}
	for {
		if c.pausing.Load() && pause(nil) {
			continue
		} else if c.gone {
			return
		}
		c.renew(&read)
		// Answers to requests that arrived together go out together: while
		// a whole next request is buffered already, its answer is appended
		// to this one's, up to a bound, and the lot goes out in one write.
		// A client that shares its connection among goroutines (see
		// client.WithPipelining) then costs the daemon two system calls per
		// batch of requests instead of two per request.
		if sc.Out.Len() > 0 && (sc.Out.Len() >= coalesceMax || !sc.In.WholeFrameBuffered()) {
			if quit, err := c.answer(!sequential || sc.In.Buffered() > 0); err != nil || quit {
				if pause(err) {
					continue
				}
				return
			}
		}
		n, err := sc.In.NextLen()
		if err != nil {
			if pause(err) {
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("ukeyd: connection ended", "uid", c.cred.UID, "err", err)
			}
			return
		}
		// A request larger than the reader's own buffer is held only if
		// the caller's uid has room for it; otherwise it is skipped and
		// refused, keeping just its tag.
		var body []byte
		var refused keys.Errno
		if n > smallFrame-4 && n+4 > c.reservedIn {
			if refused = c.reserveIn(n + 4); refused != 0 {
				// A skip cut short has consumed part of the frame: the
				// connection cannot be handed over mid-skip, and ends.
				body, err = sc.In.Skip(8)
			}
		}
		if refused == 0 {
			body, err = sc.In.Next()
			if err != nil && pause(err) {
				continue
			}
		}
		if err != nil {
			return
		}
		var resp *wire.Response
		if refused != 0 {
			if len(body) < 8 {
				return // not even a request's header: malformed
			}
			req = wire.Request{Tag: binary.BigEndian.Uint32(body), Op: wire.Op(binary.BigEndian.Uint16(body[4:])), Ints: req.Ints[:0], Bufs: req.Bufs[:0]}
			resp = fail(refused)
			c.s.cfg.Metrics.Observe(req.Op, resp.Errno, 0)
		} else if err := req.Decode(body); err != nil {
			c.s.log.Debug("ukeyd: malformed request; closing", "uid", c.cred.UID)
			return
		}
		if req.Op == wire.OpTakeover && resp == nil {
			// Another daemon takes over from this one: the connection
			// carries the hand-over, and then ends (handover.go).
			c.s.handOver(c, sc, &req, version)
			return
		}
		if sc.Out.Len() > 0 && mayWait(req.Op) {
			// Gathered answers do not wait behind a request that may wait
			// (for a helper, for a notification).
			if err := c.flush(); err != nil {
				return
			}
		}
		c.mu.Lock()
		if c.quit {
			c.mu.Unlock()
			return
		}
		c.busy = true
		c.mu.Unlock()

		if resp == nil {
			// Served while others may poll: they stop (spin.go).
			counted := !mayWait(req.Op)
			if counted {
				c.s.serving.Add(1)
			}
			start := time.Now()
			resp = c.caller.dispatch(&req)
			c.s.cfg.Metrics.Observe(req.Op, resp.Errno, time.Since(start))
			if counted {
				c.s.serving.Add(-1)
			}
		}
		resp.Tag = req.Tag
		// The whole frame is built in one buffer and goes out in one write
		// (answer, at the top of the loop).
		err = c.appendAnswer(resp)
		for _, b := range resp.Bufs {
			clear(b) // results may hold payloads: do not keep them around
		}
		if cap(c.rbuf) > readKeep {
			c.freeRead()
		}
		// The request has been handled: its bytes are wiped, and a buffer
		// grown for it shrinks back (and its reservation is returned)
		// unless more of a large pipelined request is buffered behind it.
		sc.In.Done()
		clear(req.Bufs) // aliases of the wiped body; drop the slices
		if sc.In.Held() <= smallFrame {
			c.unreserveIn()
		}
		if err != nil {
			return
		}
	}
}

// renew moves the read and write deadlines once they are due to move
// (sock.Deadline).
func (c *conn) renew(read *sock.Deadline) {
	if at, due := read.Renew(time.Now()); due {
		// Under mu, as pauseIdle sets its deadline: a renewal must not
		// move the deadline of a read that a hand-over has cut short.
		c.mu.Lock()
		if !c.pausing.Load() {
			c.uc.SetReadDeadline(at)
		}
		c.mu.Unlock()
		c.armWrite()
	}
}

// appendAnswer appends resp's frame to the answers gathered. An answer
// that would make them larger than the allowance every connection has is
// charged to the caller's uid; if that uid (or the daemon) has no room
// left, the caller gets EDQUOT (or ENOMEM) instead of the answer.
func (c *conn) appendAnswer(resp *wire.Response) error {
	out := &c.sc.Out
	at := out.Len()
	if err := out.Response(resp); err != nil {
		return err
	}
	if out.Cap() <= smallAnswer || out.Cap() <= c.reservedOut {
		return nil
	}
	if e := c.s.reserve(c.charge, out.Cap()-c.reservedOut); e != 0 {
		out.Truncate(at)
		return out.Response(&wire.Response{Tag: resp.Tag, Errno: uint16(e)})
	}
	c.reservedOut = out.Cap()
	return nil
}

// flush writes the answers gathered, the plain way.
func (c *conn) flush() error {
	dropped, err := c.sc.Flush()
	c.dropped(dropped)
	return err
}

// dropped returns the reservation of an answer buffer that grew beyond
// the allowance and has been dropped.
func (c *conn) dropped(yes bool) {
	if yes {
		c.s.unreserve(c.charge, c.reservedOut)
		c.reservedOut = 0
	}
}

// reserveIn charges a request buffer of n bytes to the caller's uid.
func (c *conn) reserveIn(n int) keys.Errno {
	if e := c.s.reserve(c.charge, n-c.reservedIn); e != 0 {
		return e
	}
	c.reservedIn = n
	return 0
}

// unreserveIn returns the request buffer's reservation.
func (c *conn) unreserveIn() {
	c.s.unreserve(c.charge, c.reservedIn)
	c.reservedIn = 0
}

func (c *conn) unreserveAll() {
	c.unreserveIn()
	c.s.unreserve(c.charge, c.reservedOut)
	c.reservedOut = 0
}

// armWrite moves the write deadline WriteTimeout ahead, unless Shutdown
// has shortened it. Like the read deadline it is moved only every eighth
// of the timeout (see serve), not on every answer: it matters only when
// an answer cannot leave.
func (c *conn) armWrite() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.quit {
		c.uc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	}
}

// mayWait reports whether serving op may wait for something other than
// the keys package: a request-key helper, a notification.
func mayWait(op wire.Op) bool { return op == wire.OpRequestKey || op == wire.OpWatchNext }

// coalesceMax bounds the answers gathered for one write.
const coalesceMax = 64 << 10

// answer writes the answers gathered and marks the connection idle. It
// reports whether the connection is to close.
//
// Unless more requests may be on their way already (more: the client may
// pipeline, or a request is buffered), it then waits for the next request
// without trying to read it first (sock.Conn.FlushAndWait): right after
// an answer the next request of a client that sends one at a time is
// never there yet, and the read would fail: one system call in three of a
// round trip.
func (c *conn) answer(more bool) (quit bool, err error) {
	if more {
		if err := c.flush(); err != nil {
			return true, err
		}
		return c.idle(), nil
	}
	quit, dropped, err := c.sc.FlushAndWait(c.idleFn)
	c.dropped(dropped)
	return quit, err
}

// idle marks the connection between requests and reports whether it is
// to close.
func (c *conn) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	return c.quit
}
