package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// conn is one client connection.
type conn struct {
	s      *Server
	uc     *net.UnixConn
	cred   keys.Cred
	proc   *proc
	caller *keys.Caller // the process's caller, or a request-key helper's
	helper *helperConn  // set once a helper token is accepted (helper.go)

	mu   sync.Mutex
	busy bool // a request is being served
	quit bool // close once the current request is answered

	watch *keys.WatchQueue

	ans  answering // the serving goroutine's own
	rbuf []byte    // payloads read (dispatch.go), wiped after each answer

	fr *wire.Reader // the serving goroutine's own

	// Bytes charged to the uid for buffers larger than the allowance:
	// the request buffer and the answer buffer.
	reservedIn, reservedOut int
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
	if c.watch != nil {
		c.watch.Close() // wakes an OpWatchNext in flight
	}
}

func (c *conn) serve() {
	defer c.s.release(c)
	defer c.uc.Close()
	defer func() {
		c.mu.Lock()
		q := c.watch
		c.mu.Unlock()
		if q != nil {
			q.Close()
		}
	}()
	timeout := c.s.cfg.ReadTimeout
	deadline := time.Now().Add(timeout)
	c.uc.SetReadDeadline(deadline)
	c.armWrite()
	// One reader per connection, whose buffer is wiped as each request is
	// answered: a frame's header and body then usually arrive in one read
	// system call, and no payload stays behind in it. Nothing longer than
	// a Hello is read before the handshake.
	fr := wire.NewReader(c.uc, smallFrame)
	c.fr = fr
	defer fr.Release()
	defer c.unreserveAll()
	fr.SetLimit(wire.MaxHello)
	hello, err := fr.Next()
	if err != nil {
		return
	}
	v, err := wire.DecodeHello(hello)
	if err != nil || v < 1 {
		c.s.log.Debug("ukeyd: bad handshake", "uid", c.cred.UID, "pid", c.cred.PID)
		return
	}
	fr.SetLimit(wire.MaxFrame)
	v = min(v, wire.Version)
	if err := wire.WriteFrame(c.uc, wire.EncodeHello(v)); err != nil {
		return
	}
	// Only a client that sends one request at a time may be waited for
	// without reading (answer): another may already have sent the next.
	sequential := wire.Sequential(v)
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return
	}
	// The request and the response frame are reused from one request to
	// the next: serving a request allocates only what the keys package
	// returns.
	var req wire.Request
	var out []byte
	for {
		// Moving the deadline re-arms a runtime timer; doing it on every
		// request costs more than the rest of a key read. Move it only
		// once an eighth of the timeout has passed: a silent connection is
		// then closed between 7/8 and all of the timeout after its last
		// request.
		if now := time.Now(); deadline.Sub(now) < timeout-timeout/8 {
			deadline = now.Add(timeout)
			c.uc.SetReadDeadline(deadline)
			c.armWrite()
		}
		// Answers to requests that arrived together go out together: while
		// a whole next request is buffered already, its answer is appended
		// to this one's, up to a bound, and the lot goes out in one write.
		// A client that shares its connection among goroutines (see
		// client.WithPipelining) then costs the daemon two system calls per
		// batch of requests instead of two per request.
		if len(out) > 0 && (len(out) >= coalesceMax || !fr.WholeFrameBuffered()) {
			quit, err := c.answer(raw, out, !sequential || fr.Buffered() > 0)
			out = c.dropAnswer(out)
			if err != nil || quit {
				return
			}
		}
		n, err := fr.NextLen()
		if err != nil {
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
				body, err = fr.Skip(8)
			}
		}
		if refused == 0 {
			body, err = fr.Next()
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
		if len(out) > 0 && mayWait(req.Op) {
			// Gathered answers do not wait behind a request that may wait
			// (for a helper, for a notification).
			_, err := c.uc.Write(out)
			out = c.dropAnswer(out)
			if err != nil {
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
			start := time.Now()
			resp = c.dispatch(&req)
			c.s.cfg.Metrics.Observe(req.Op, resp.Errno, time.Since(start))
		}
		resp.Tag = req.Tag
		// The whole frame is built in one buffer and goes out in one write
		// (answer, at the top of the loop).
		out, err = c.appendAnswer(out, resp)
		for _, b := range resp.Bufs {
			clear(b) // results may hold payloads: do not keep them around
		}
		// The request has been handled: its bytes are wiped, and a buffer
		// grown for it shrinks back (and its reservation is returned)
		// unless more of a large pipelined request is buffered behind it.
		fr.Done()
		clear(req.Bufs) // aliases of the wiped body; drop the slices
		if fr.Held() <= smallFrame {
			c.unreserveIn()
		}
		if err != nil {
			clear(out)
			return
		}
	}
}

// appendAnswer appends resp's frame to out. An answer that would make out
// larger than the allowance every connection has is charged to the
// caller's uid; if that uid (or the daemon) has no room left, the caller
// gets EDQUOT (or ENOMEM) instead of the answer.
func (c *conn) appendAnswer(out []byte, resp *wire.Response) ([]byte, error) {
	at := len(out)
	grown, err := wire.AppendResponse(wire.BeginFrame(out), resp)
	if err == nil {
		grown, err = wire.EndFrame(grown, at)
	}
	if err != nil {
		return grown, err
	}
	if cap(grown) <= smallAnswer || cap(grown) <= c.reservedOut {
		return grown, nil
	}
	if e := c.s.reserve(c.cred.UID, cap(grown)-c.reservedOut); e != 0 {
		clear(grown[at:])
		refusal := &wire.Response{Tag: resp.Tag, Errno: uint16(e)}
		grown, err = wire.AppendResponse(wire.BeginFrame(grown[:at]), refusal)
		if err == nil {
			grown, err = wire.EndFrame(grown, at)
		}
		return grown, err
	}
	c.reservedOut = cap(grown)
	return grown, nil
}

// dropAnswer wipes the answers written and returns the buffer for the
// next ones; one that grew beyond the allowance is dropped, and its
// reservation returned.
func (c *conn) dropAnswer(out []byte) []byte {
	clear(out)
	if cap(out) > smallAnswer {
		c.s.unreserve(c.cred.UID, c.reservedOut)
		c.reservedOut = 0
		return nil // one large answer does not pin its buffer
	}
	return out[:0]
}

// reserveIn charges a request buffer of n bytes to the caller's uid.
func (c *conn) reserveIn(n int) keys.Errno {
	if e := c.s.reserve(c.cred.UID, n-c.reservedIn); e != 0 {
		return e
	}
	c.reservedIn = n
	return 0
}

// unreserveIn returns the request buffer's reservation.
func (c *conn) unreserveIn() {
	c.s.unreserve(c.cred.UID, c.reservedIn)
	c.reservedIn = 0
}

func (c *conn) unreserveAll() {
	c.unreserveIn()
	c.s.unreserve(c.cred.UID, c.reservedOut)
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

// answer writes the response frame f and marks the connection idle. It
// reports whether the connection is to close.
//
// Unless more requests may be on their way already (more: the client may
// pipeline, or a request is buffered), it then waits for the next request
// without trying to read it first: right after an answer the next request
// of a client that sends one at a time is never there yet, and that
// failed read was one of the three system calls a round trip cost the
// daemon. Waiting without reading is safe only because the write happens
// inside the raw read: the runtime forgets the socket's readiness when a
// raw read begins, so a request that arrived before the write could go
// unnoticed; a client that waits for each answer sends nothing before it.
func (c *conn) answer(raw syscall.RawConn, f []byte, more bool) (quit bool, err error) {
	if more {
		_, err = c.uc.Write(f)
		return c.idle(), err
	}
	a := &c.ans
	*a = answering{f: f, step: a.step}
	if a.step == nil {
		a.step = a.advance // bound once: a method value per call would allocate
	}
	a.c = c
	rerr := raw.Read(a.step)
	a.f, a.c = nil, nil
	switch {
	case a.err != nil:
		return true, a.err
	case a.written < len(f):
		if _, err := c.uc.Write(f[a.written:]); err != nil {
			return true, err
		}
		return c.idle(), nil
	case rerr != nil:
		// Closed by Shutdown, or silent past the deadline: ReadFrame
		// would say the same.
		return true, nil
	}
	return a.quit, nil
}

// answering is the state of one answer, kept in the conn so that the raw
// read's callback allocates nothing.
type answering struct {
	c       *conn
	f       []byte
	written int
	wrote   bool
	quit    bool
	err     error
	step    func(fd uintptr) bool
}

// advance is the raw read's callback: it writes the answer the first
// time, and hands over to ReadFrame once woken.
func (a *answering) advance(fd uintptr) bool {
	if a.wrote {
		return true // readable (or woken for nothing): ReadFrame reads
	}
	a.wrote = true
	for a.written < len(a.f) {
		n, err := unix.Write(int(fd), a.f[a.written:])
		if n > 0 {
			a.written += n
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return true // the socket is full: finish with a plain write
		case err != nil:
			a.err = err
			return true
		}
	}
	if a.quit = a.c.idle(); a.quit {
		return true
	}
	return false // wait for the next request
}

// idle marks the connection between requests and reports whether it is
// to close.
func (c *conn) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	return c.quit
}
