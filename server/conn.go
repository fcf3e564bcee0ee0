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
	c.uc.SetReadDeadline(time.Now().Add(timeout))
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
	var buf, out []byte
	for {
		c.uc.SetReadDeadline(time.Now().Add(timeout))
		body, err := wire.ReadFrame(br, buf)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.s.log.Debug("ukeyd: connection ended", "uid", c.cred.UID, "err", err)
			}
			return
		}
		buf = body
		req, err := wire.DecodeRequest(body)
		if err != nil {
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
		resp := c.dispatch(req)
		c.s.cfg.Metrics.Observe(req.Op, resp.Errno, time.Since(start))
		resp.Tag = req.Tag
		out, err = wire.AppendResponse(out[:0], resp)
		for _, b := range resp.Bufs {
			clear(b) // results may hold payloads: do not keep them around
		}
		if err == nil {
			f, _ := wire.AppendFrame(nil, out)
			_, err = c.uc.Write(f)
			clear(f)
		}
		clear(out)
		clear(body)

		c.mu.Lock()
		c.busy = false
		quit := c.quit
		c.mu.Unlock()
		if err != nil || quit {
			return
		}
	}
}
