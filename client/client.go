// Package client is the Go API to ukeys, shaped like libkeyutils: one
// method per keyctl operation, errors comparable with errors.Is against
// the keyctl package's errno values (which package keys shares). A Client
// talks to the ukeyd daemon over its Unix socket, or is served in process
// (New with a server.Local) with exactly the daemon's behaviour. A Client
// may be shared by goroutines: by default their calls take turns, one
// round trip at a time; a Client dialled WithPipelining sends concurrent
// calls without waiting for each other's answers, which multiplies the
// throughput of one connection shared by many goroutines. It links none
// of the key retention model: its vocabulary is package keyctl's.
package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// SessionEnv carries a session keyring to child processes: "serial:token".
// A process that presents the token possesses that session keyring.
const SessionEnv = "UKEYS_SESSION"

// Client is a connection to ukeys.
type Client struct {
	mu    sync.Mutex
	conn  io.ReadWriteCloser
	raw   syscall.RawConn
	local Handler
	tag   uint32

	// Reused from one request to the next, under mu: the request, the
	// outgoing frame, the incoming frame and its decoding.
	req   wire.Request
	out   []byte
	inBuf []byte // the incoming frame
	in    []byte // its body
	resp  wire.Response
	rt    exchange

	// pl, with WithPipelining, replaces all of the above but conn.
	pl *pipeline

	sessionErr error // see SessionLost
}

// handshakeTimeout bounds the wait for the daemon's hello.
var handshakeTimeout = 10 * time.Second

// Dial connects to the daemon at the Unix socket path and, if the
// environment carries a session (SessionEnv) or a request-key helper
// token, presents it.
func Dial(path string, opts ...Option) (*Client, error) {
	var cfg dialConfig
	for _, o := range opts {
		o(&cfg)
	}
	conn, err := dialUnix(path, 5*time.Second)
	if err != nil {
		return nil, err
	}
	// Version 2 promises one request at a time, which do keeps: it holds
	// mu from sending a request until its answer is read. A pipelining
	// client speaks version 1, which may have several in flight.
	var version uint16 = wire.Version
	if cfg.pipelined {
		version = 1
	}
	// A daemon answers the hello at once; one that does not (its
	// descriptor table is full and this connection waits in its backlog)
	// is reported rather than waited for forever.
	f, _ := conn.(*os.File)
	if f != nil {
		f.SetReadDeadline(time.Now().Add(handshakeTimeout))
	}
	werr := wire.WriteFrame(conn, wire.EncodeHello(version))
	if werr != nil && f != nil {
		// A daemon that refuses this process writes why and closes at
		// once, perhaps before the hello arrived (EPIPE): the refusal is
		// still there to read, briefly.
		f.SetReadDeadline(time.Now().Add(time.Second))
	}
	hello, err := wire.ReadFrame(conn, nil)
	if f != nil {
		f.SetReadDeadline(time.Time{})
	}
	if err != nil {
		conn.Close()
		if werr != nil {
			return nil, werr
		}
		return nil, fmt.Errorf("client: handshake: %w", err)
	}
	if _, err := wire.DecodeHello(hello); err != nil {
		conn.Close()
		var refused *wire.Refused
		if errors.As(err, &refused) {
			// The daemon will not serve this process: its uid holds its
			// share of the daemon already (EDQUOT), or the daemon is full
			// (EMFILE).
			return nil, &Error{Op: "connect", Errno: keyctl.Errno(refused.Errno)}
		}
		return nil, err
	}
	// The file from dialUnix reads and writes through the runtime's
	// poller, and so do raw reads of it (roundTrip).
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	c := &Client{conn: conn, raw: raw}
	if cfg.pipelined {
		c.pl = newPipeline(conn)
	}
	if tok := os.Getenv(HelperEnv); tok != "" {
		if _, err := c.attach(tok); err != nil {
			c.Close()
			return nil, fmt.Errorf("client: helper token refused: %w", err)
		}
	} else if s := os.Getenv(SessionEnv); s != "" {
		if _, tok, ok := cut(s); ok {
			if _, err := c.attach(tok); err != nil {
				// The session is gone (the daemon restarted): the daemon
				// gave this process a revoked session keyring, so that
				// what it adds to @s fails instead of being lost.
				c.sessionErr = err
			}
		}
	}
	return c, nil
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// SessionLost returns why the session that SessionEnv named could not be
// joined when the client was dialled (nil if it was, or if there was
// none). The process then has a revoked session keyring: operations on
// @s fail with EKEYREVOKED until it joins another session.
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
	return c.conn.Close()
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
	if err := c.req.Set(op, args...); err != nil {
		return nil, err
	}
	c.tag++
	c.req.Tag = c.tag
	var resp *wire.Response
	if c.local != nil {
		resp = c.local.Do(&c.req)
	} else {
		// The frame is built in place and sent with one write.
		out, err := wire.AppendRequest(wire.BeginFrame(c.out[:0]), &c.req)
		if err == nil {
			out, err = wire.EndFrame(out, 0)
		}
		if err == nil {
			err = c.roundTrip(out)
		}
		clear(out) // requests may carry payloads
		c.out = out
		if cap(out) > 64<<10 {
			c.out = nil
		}
		if err != nil {
			c.forget()
			return nil, err
		}
		if err := c.resp.Decode(c.in); err != nil {
			c.forget()
			return nil, err
		}
		resp = &c.resp
		if resp.Tag != c.req.Tag {
			c.forget()
			return nil, ErrProtocol
		}
	}
	c.forget()
	out, err := answer(op, resp)
	if c.local == nil {
		clear(c.in) // the copy is the caller's; wipe the frame
		clear(c.resp.Bufs)
		if cap(c.inBuf) > 64<<10 {
			c.inBuf = nil // one large answer does not pin its buffer
		}
	}
	return out, err
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

// roundTrip writes the request frame out and reads the answer's body into
// c.in, in two system calls: the write, and one read once the answer is
// there. A plain write and read would cost a third, a read tried before
// the answer can have arrived. Waiting without reading first is safe
// because the write happens inside the raw read: the runtime forgets the
// socket's readiness when a raw read begins, and nothing arrives in answer
// to a request that has not been written.
func (c *Client) roundTrip(out []byte) error {
	t := &c.rt
	in := c.inBuf[:cap(c.inBuf)]
	if len(in) < 256 {
		in = make([]byte, 256)
	}
	*t = exchange{out: out, in: in, need: -1, step: t.step}
	if t.step == nil {
		t.step = t.advance // bound once: a method value per call would allocate
	}
	err := c.raw.Read(t.step)
	if err == nil && t.err == nil && t.written < len(out) {
		// The socket was full: finish the write the plain way, then read.
		if _, err = c.conn.Write(out[t.written:]); err == nil {
			t.written = len(out)
			err = c.raw.Read(t.step)
		}
	}
	if err == nil {
		err = t.err
	}
	in = t.in
	c.inBuf = in
	if err != nil {
		clear(in[:t.have])
		c.in = nil
	} else {
		c.in = in[4 : 4+t.need]
	}
	t.out, t.in = nil, nil
	return err
}

// exchange is the state of one roundTrip, kept in the Client so that the
// raw read's callback allocates nothing.
type exchange struct {
	out, in []byte
	written int  // bytes of out written
	wrote   bool // the write was tried
	have    int  // bytes of in read
	need    int  // the answer's length, once its prefix is in; else -1
	err     error
	step    func(fd uintptr) bool
}

// advance is the raw read's callback: it writes the request the first
// time, and reads the answer after.
func (t *exchange) advance(fd uintptr) bool {
	if !t.wrote {
		t.wrote = true
		for t.written < len(t.out) {
			n, err := syscall.Write(int(fd), t.out[t.written:])
			if n > 0 {
				t.written += n
			}
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true // the socket is full: finish with a plain write
			case err != nil:
				t.err = err
				return true
			}
		}
		return false // the answer cannot be there yet: wait for it
	}
	for {
		n, err := syscall.Read(int(fd), t.in[t.have:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			t.err = err
			return true
		case n == 0:
			t.err = io.ErrUnexpectedEOF
			if t.have == 0 {
				t.err = io.EOF
			}
			return true
		}
		t.have += n
		if t.need < 0 && t.have >= 4 {
			if t.need = int(binary.BigEndian.Uint32(t.in)); t.need > wire.MaxFrame {
				t.err = wire.ErrFrameTooLarge
				return true
			}
			if 4+t.need > len(t.in) {
				t.in = append(t.in[:t.have], make([]byte, 4+t.need-t.have)...)
			}
		}
		if t.need >= 0 && t.have >= 4+t.need {
			if t.have > 4+t.need {
				t.err = ErrProtocol // the daemon answers each request once
			}
			return true
		}
		if t.have == len(t.in) {
			t.in = append(t.in, make([]byte, len(t.in))...)
		}
	}
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

// Unwrap lets errors.Is match the errno.
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
