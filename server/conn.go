package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"time"

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

	mu   sync.Mutex
	busy bool // a request is being served
	quit bool // close once the current request is answered

	watch *keys.WatchQueue
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
	// One buffered reader per connection: a frame's header and body then
	// usually arrive in one read system call.
	br := bufio.NewReaderSize(c.uc, 16<<10)
	hello, err := wire.ReadFrame(br, nil)
	if err != nil {
		return
	}
	v, err := wire.DecodeHello(hello)
	if err != nil || v < 1 {
		c.s.log.Debug("ukeyd: bad handshake", "uid", c.cred.UID, "pid", c.cred.PID)
		return
	}
	if err := wire.WriteFrame(c.uc, wire.EncodeHello(min(v, wire.Version))); err != nil {
		return
	}
	// The request, its body and the response frame are reused from one
	// request to the next: serving a request allocates only what the keys
	// package returns.
	var req wire.Request
	var body, out []byte
	for {
		// Moving the deadline re-arms a runtime timer; doing it on every
		// request costs more than the rest of a key read. Move it only
		// once an eighth of the timeout has passed: a silent connection is
		// then closed between 7/8 and all of the timeout after its last
		// request.
		if now := time.Now(); deadline.Sub(now) < timeout-timeout/8 {
			deadline = now.Add(timeout)
			c.uc.SetReadDeadline(deadline)
		}
		body, err = wire.ReadFrame(br, body)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("ukeyd: connection ended", "uid", c.cred.UID, "err", err)
			}
			return
		}
		if err := req.Decode(body); err != nil {
			c.s.log.Debug("ukeyd: malformed request; closing", "uid", c.cred.UID)
			return
		}
		c.mu.Lock()
		if c.quit {
			c.mu.Unlock()
			return
		}
		c.busy = true
		c.mu.Unlock()

		start := time.Now()
		resp := c.dispatch(&req)
		c.s.cfg.Metrics.Observe(req.Op, resp.Errno, time.Since(start))
		resp.Tag = req.Tag
		// The whole frame is built in one buffer and goes out in one write.
		out, err = wire.AppendResponse(wire.BeginFrame(out[:0]), resp)
		if err == nil {
			out, err = wire.EndFrame(out, 0)
		}
		for _, b := range resp.Bufs {
			clear(b) // results may hold payloads: do not keep them around
		}
		if err == nil {
			_, err = c.uc.Write(out)
		}
		clear(out)
		clear(body)
		clear(req.Bufs) // aliases of body, already cleared; drop the slices
		if cap(body) > 64<<10 {
			body = nil // one large payload does not pin a megabyte per connection
		}
		if cap(out) > 64<<10 {
			out = nil
		}

		c.mu.Lock()
		c.busy = false
		quit := c.quit
		c.mu.Unlock()
		if err != nil || quit {
			return
		}
	}
}
