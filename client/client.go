package client

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// SessionEnv carries a session keyring to child processes: "serial:token".
// A process that presents the token possesses that session keyring.
const SessionEnv = "UKEYS_SESSION"

// Client is a connection to ukeys.
type Client struct {
	mu    sync.Mutex
	sc    *sock.Conn
	local Handler
	tag   uint32

	// Reused from one request to the next, under mu.
	req  wire.Request
	resp wire.Response

	// pl, with WithPipelining, replaces mu, tag, req and resp.
	pl *pipeline

	sessionErr error // see SessionLost

	// pending, for a client dialled WithDeferredHandshake, holds what
	// the handshake still has to read: the hello and the session
	// attach's answer go out with the first call's request and are read
	// before its answer. Under mu.
	pending *pendingHandshake
}

// pendingHandshake is what a handshake whose frames wait in the output
// buffer still has to read.
type pendingHandshake struct {
	attachTag uint32        // the token's attach's tag, or 0 if none was sent
	spin      time.Duration // WithSpin's, if the hello offered version 3
	helper    bool          // the token is a request-key helper's
}

// handshakeTimeout bounds the wait for the daemon's hello.
var handshakeTimeout = 10 * time.Second

// inSize is the size of the buffer a client reads answers into between
// large ones.
const inSize = 16 << 10

// Dial connects to the daemon at the Unix socket path and, if the
// environment carries a session ([SessionEnv]) or a request-key helper
// token, presents it.
func Dial(path string, opts ...Option) (*Client, error) {
	var cfg dialConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.pipelined && cfg.blocking {
		return nil, errors.New("client: WithBlockingIO and WithPipelining exclude each other")
	}
	f, err := dialUnix(path, 5*time.Second, cfg.blocking)
	if err != nil {
		return nil, err
	}
	sc, err := sock.New(f, inSize)
	if err != nil {
		f.Close()
		return nil, err
	}
	if cfg.blocking {
		sc.SetBlocking()
	}
	// Version 2 promises one request at a time, which call keeps: it
	// holds mu from sending a request until its answer is read; version
	// 3, spoken by a client that polls for its answers (WithSpin), asks
	// the daemon to poll for its requests too. A pipelining client
	// speaks version 1, which may have several in flight.
	var version uint16 = wire.Version
	switch {
	case cfg.pipelined:
		version = 1
	case cfg.spin <= 0:
		version = 2
	}
	c := &Client{sc: sc}
	// A token to present goes out with the hello, in the same write, and
	// its answer is read after the daemon's hello: one round trip for
	// both, where a short-lived program (ukeyctl, in a session) would
	// otherwise wait for two before its first call.
	helper := os.Getenv(HelperEnv)
	tok := helper
	if tok == "" {
		if s := os.Getenv(SessionEnv); s != "" {
			if _, t, ok := cut(s); ok {
				tok = t
			}
		}
	}
	var attach *wire.Request
	if tok != "" {
		if err := c.req.Set(wire.OpSessionAttach, wire.Str(tok)); err != nil {
			f.Close()
			return nil, err
		}
		c.tag++
		c.req.Tag = c.tag
		attach = &c.req
	}
	// The hello and the attach wait in the output buffer, to go out in
	// one write: now, or with the first call's request
	// (WithDeferredHandshake).
	sc.Out.Body(wire.EncodeHello(version))
	p := &pendingHandshake{helper: helper != ""}
	if wire.Polls(version) {
		p.spin = cfg.spin
	}
	if attach != nil {
		if err := sc.Out.Request(attach); err != nil {
			c.forget()
			f.Close()
			return nil, err
		}
		p.attachTag = attach.Tag
	}
	c.forget()
	// A request-key helper's token is checked before anything else is
	// sent: a request that went out with a token the daemon refuses
	// would be served with the helper's own authority, and leave its
	// effects behind a failed call.
	if cfg.deferred && !cfg.pipelined && helper == "" {
		c.pending = p
		return c, nil
	}
	if err := c.finishHandshake(p, false); err != nil {
		return nil, err // the socket is closed
	}
	if cfg.pipelined {
		c.pl = newPipeline(sc)
	}
	return c, nil
}

// attached applies the answer to the session attach that went out with
// the hello (err: its error, if any; helper: the token was a request-key
// helper's) and returns an error if the client cannot go on.
func (c *Client) attached(err error, helper bool) error {
	switch {
	case err != nil && helper:
		return fmt.Errorf("client: helper token refused: %w", err)
	case err != nil && errors.Is(err, ErrProtocol):
		return err
	case err != nil:
		// The session is gone (the daemon restarted): the daemon
		// gave this process a revoked session keyring, so that what
		// it adds to @s fails instead of being lost.
		c.sessionErr = err
	}
	return nil
}

// setTimeout bounds the wait for the daemon's next bytes to d (0: no
// bound), by the socket's receive timeout or the poller's deadline.
func setTimeout(sc *sock.Conn, d time.Duration) {
	s := sc.Stream()
	if sc.Blocking() {
		setReceiveTimeout(s, d)
	} else if d > 0 {
		s.SetReadDeadline(time.Now().Add(d))
	} else {
		s.SetReadDeadline(time.Time{})
	}
}

// readHello reads the daemon's hello, or its refusal; werr is the error,
// if any, of the write that sent the client's hello.
func readHello(sc *sock.Conn, werr error) (uint16, error) {
	// Nothing larger than a hello is read before the daemon's hello.
	sc.In.SetLimit(wire.MaxHello)
	hello, err := sc.In.Next()
	sc.In.SetLimit(wire.MaxFrame)
	defer sc.In.Done()
	if err != nil {
		if werr != nil {
			return 0, werr
		}
		if sc.Blocking() && errors.Is(err, syscall.EAGAIN) {
			err = os.ErrDeadlineExceeded // the receive timeout, as the poller's deadline says it
		}
		return 0, fmt.Errorf("client: handshake: %w", err)
	}
	v, err := wire.DecodeHello(hello)
	if err != nil {
		var refused *wire.Refused
		if errors.As(err, &refused) {
			// The daemon will not serve this process: its uid holds its
			// share of the daemon already (EDQUOT), or the daemon is full
			// (EMFILE).
			return 0, &Error{Op: "connect", Errno: keyctl.Errno(refused.Errno)}
		}
		return 0, err
	}
	return v, werr
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// SessionLost returns why the session that [SessionEnv] named could not be
// joined when the client was dialled (nil if it was, or if there was
// none; [WithDeferredHandshake], nil until the first call has returned).
// The process then has a revoked session keyring: operations on @s fail
// with EKEYREVOKED until it joins another session.
func (c *Client) SessionLost() error { return c.sessionErr }

// Close closes the connection; the daemon releases the process's keyrings
// when its last connection closes.
func (c *Client) Close() error {
	if c.local != nil {
		c.local.Close()
		return nil
	}
	if c.pl != nil {
		return c.pl.close()
	}
	// The socket first: a call that another goroutine is waiting in for
	// its answer (NextNotification, which may wait for as long as no
	// event comes) then fails at once and lets go of mu, instead of
	// holding Close until an answer comes. (A client made WithBlockingIO
	// waits in the read system call, which a close does not interrupt.)
	err := c.sc.Stream().Close()
	c.mu.Lock()
	c.sc.In.Release()
	c.mu.Unlock()
	return err
}

// ErrProtocol reports an answer that does not fit the request.
var ErrProtocol = errors.New("client: protocol error")

// call sends one request, with args in the order of the operation's
// entry in wire's table, and returns the answer, which the caller owns.
func (c *Client) call(op wire.Op, args ...wire.Value) (*wire.Response, error) {
	if c.pl != nil {
		return c.callPipelined(op, args)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.forget()
	if err := c.req.Set(op, args...); err != nil {
		return nil, err
	}
	c.tag++
	c.req.Tag = c.tag
	if c.local != nil {
		return answer(op, c.local.Do(&c.req))
	}
	// The frame is built in place and goes out in one write, after which
	// the answer is waited for without a read that would fail.
	err := c.sc.Out.Request(&c.req)
	if err != nil {
		return nil, err
	}
	if p := c.pending; p != nil {
		return c.callFirst(op, p)
	}
	if _, _, err = c.sc.FlushAndWait(nil); err != nil {
		return nil, err
	}
	return c.receive(op)
}

// callFirst is call for the first request of a client dialled
// WithDeferredHandshake: the hello, the attach and the request go out in
// one write, and their answers are read in that order. mu is held.
func (c *Client) callFirst(op wire.Op, p *pendingHandshake) (*wire.Response, error) {
	if err := c.finishHandshake(p, true); err != nil {
		return nil, err
	}
	return c.receive(op)
}

// finishHandshake writes what the output buffer holds (the hello, the
// attach and perhaps a request) and reads the daemon's hello and the
// attach's answer; request: a request's answer follows. A client whose
// handshake fails is closed: every later call fails too. mu is held.
func (c *Client) finishHandshake(p *pendingHandshake, request bool) error {
	c.pending = nil
	err := c.handshakeReply(p, request)
	if err != nil {
		c.sc.Out.Reset()
		c.sc.Stream().Close()
		return &HandshakeError{Err: err}
	}
	return nil
}

// HandshakeError reports a connection the daemon did not take up: it refused
// the process (Err is then an *[Error] with Op "connect": EDQUOT when the
// uid holds its share of the daemon, EMFILE when the daemon is full), or its
// hello did not come. [Dial] returns it; [WithDeferredHandshake], the first
// call does.
type HandshakeError struct {
	Err error
}

func (e *HandshakeError) Error() string { return e.Err.Error() }
func (e *HandshakeError) Unwrap() error { return e.Err }

// handshakeReply is finishHandshake's exchange. mu is held.
func (c *Client) handshakeReply(p *pendingHandshake, request bool) error {
	setTimeout(c.sc, handshakeTimeout)
	defer setTimeout(c.sc, 0)
	_, _, werr := c.sc.FlushAndWait(nil)
	switch {
	case werr == nil:
	case errors.Is(werr, syscall.EAGAIN) || errors.Is(werr, os.ErrDeadlineExceeded):
		// The wait for the hello timed out.
		return fmt.Errorf("client: handshake: %w", os.ErrDeadlineExceeded)
	default:
		// A daemon that refuses this process writes why and closes at
		// once, perhaps before the hello arrived (EPIPE): the refusal is
		// still there to read, briefly.
		setTimeout(c.sc, time.Second)
	}
	v, err := readHello(c.sc, werr)
	if err != nil {
		return err
	}
	if p.spin > 0 && wire.Polls(v) {
		// The daemon agreed to poll too: polling alone would hold a
		// processor its woken thread needs.
		c.sc.SetSpin(p.spin)
	}
	if p.attachTag == 0 {
		return nil
	}
	_, err = c.receiveTag(wire.OpSessionAttach, p.attachTag, !request)
	return c.attached(err, p.helper)
}

// receive reads the answer to the request in c.req. mu is held.
func (c *Client) receive(op wire.Op) (*wire.Response, error) {
	return c.receiveTag(op, c.req.Tag, true)
}

// receiveTag reads the answer to an earlier request of op, tagged tag;
// last: no other answer may follow it (the daemon answers each request
// once), where the attach's answer is followed by the first call's. mu
// is held.
func (c *Client) receiveTag(op wire.Op, tag uint32, last bool) (*wire.Response, error) {
	body, err := c.sc.In.Next()
	defer c.sc.In.Done() // the copy is the caller's; wipe the frame
	if err == nil && last && c.sc.In.Buffered() > 0 {
		err = ErrProtocol
	}
	if err == nil {
		err = c.resp.Decode(body)
	}
	defer clear(c.resp.Bufs)
	if err == nil && c.resp.Tag != tag {
		err = ErrProtocol
	}
	if err != nil {
		return nil, err
	}
	return answer(op, &c.resp)
}

// forget drops the request's references to the caller's buffers.
func (c *Client) forget() {
	clear(c.req.Bufs)
	c.req.Bufs = c.req.Bufs[:0]
}

// answer turns a response into the caller's result: an *Error for an
// errno, ErrProtocol for an answer that does not carry what the
// operation's entry says, or else a copy the caller owns.
func answer(op wire.Op, resp *wire.Response) (*wire.Response, error) {
	if resp.Errno != 0 {
		return nil, &Error{Op: op.String(), Errno: keyctl.Errno(resp.Errno)}
	}
	if wire.SpecOf(op).CheckResponse(resp) != nil {
		return nil, ErrProtocol
	}
	return detach(resp), nil
}

// callPipelined is call for a client made WithPipelining: no lock is
// held while the request is in flight.
func (c *Client) callPipelined(op wire.Op, args []wire.Value) (*wire.Response, error) {
	var req wire.Request
	if err := req.Set(op, args...); err != nil {
		return nil, err
	}
	cl, err := c.pl.do(&req)
	if err != nil {
		return nil, err
	}
	defer c.pl.release(cl) // wipes the answer; detach made the caller's copy
	var resp wire.Response
	if err := resp.Decode(cl.body); err != nil {
		return nil, err
	}
	return answer(op, &resp)
}

// detach copies a response out of the buffers the next request reuses.
func detach(r *wire.Response) *wire.Response {
	out := &wire.Response{Tag: r.Tag}
	if len(r.Ints) > 0 {
		out.Ints = append([]int64(nil), r.Ints...)
	}
	if len(r.Bufs) > 0 {
		out.Bufs = make([][]byte, len(r.Bufs))
		for i, b := range r.Bufs {
			if b != nil {
				out.Bufs[i] = append(make([]byte, 0, len(b)), b...)
			}
		}
	}
	return out
}

// Error is an operation's failure.
type Error struct {
	Op    string
	Errno keyctl.Errno
}

func (e *Error) Error() string { return e.Op + ": " + e.Errno.Error() }

// Unwrap lets [errors.Is] match the errno.
func (e *Error) Unwrap() error { return e.Errno }

func serial(r *wire.Response, err error) (keyctl.Serial, error) {
	if err != nil {
		return 0, err
	}
	if len(r.Ints) < 1 {
		return 0, ErrProtocol
	}
	return keyctl.Serial(r.Ints[0]), nil
}

func bytesOf(r *wire.Response, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if len(r.Bufs) < 1 {
		return nil, ErrProtocol
	}
	return r.Bufs[0], nil // already the caller's own copy (detach)
}

func nothing(_ *wire.Response, err error) error { return err }
