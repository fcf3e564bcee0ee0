package client

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

var deferredModes = []struct {
	name string
	opts []Option
}{
	{"poller", []Option{WithDeferredHandshake()}},
	{"blocking", []Option{WithBlockingIO(), WithDeferredHandshake()}},
}

// WithDeferredHandshake: Dial sends nothing; the first call's write
// carries the hello, the session attach and the request, and the daemon
// has all three before it answers any. The answers are read in order: a
// refused session is SessionLost's, the call gets its own answer, and the
// next call is an ordinary one.
func TestDeferredHandshakeOneWrite(t *testing.T) {
	for _, mode := range deferredModes {
		t.Run(mode.name, func(t *testing.T) {
			path, ln := listenFake(t)
			t.Setenv(SessionEnv, "123:the-token")
			accepted := make(chan net.Conn, 1)
			go func() {
				if conn, err := ln.Accept(); err == nil {
					accepted <- conn
				}
			}()
			c, err := Dial(path, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conn := <-accepted
			defer conn.Close()
			buf := make([]byte, 1<<16)
			conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := conn.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Dial wrote before the first call (read: %v)", err)
			}

			got := make(chan error, 1)
			go func() {
				conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := wire.ReadFrame(conn, buf); err != nil {
					got <- err
					return
				}
				body, err := wire.ReadFrame(conn, buf)
				if err != nil {
					got <- err
					return
				}
				attach, err := wire.DecodeRequest(body)
				if err != nil || attach.Op != wire.OpSessionAttach || string(attach.Buf(0)) != "the-token" {
					got <- errors.New("the session attach did not follow the hello")
					return
				}
				body, err = wire.ReadFrame(conn, buf)
				if err != nil {
					got <- errors.New("the request did not come with the hello: " + err.Error())
					return
				}
				req, err := wire.DecodeRequest(body)
				if err != nil || req.Op != wire.OpGetKeyringID {
					got <- errors.New("the third frame is not the call's request")
					return
				}
				got <- nil
				// All three answers in one write: the client must read them
				// out of one buffer.
				out, _ := wire.AppendFrame(nil, wire.EncodeHello(wire.Version))
				b, _ := wire.AppendResponse(nil, &wire.Response{Tag: attach.Tag, Errno: uint16(keyctl.EKEYREVOKED)})
				out, _ = wire.AppendFrame(out, b)
				b, _ = wire.AppendResponse(nil, &wire.Response{Tag: req.Tag, Ints: []int64{42}})
				out, _ = wire.AppendFrame(out, b)
				conn.Write(out)
				// The next call is an ordinary one.
				body, err = wire.ReadFrame(conn, buf)
				if err != nil {
					return
				}
				req, _ = wire.DecodeRequest(body)
				b, _ = wire.AppendResponse(nil, &wire.Response{Tag: req.Tag, Ints: []int64{43}})
				wire.WriteFrame(conn, b)
			}()
			id, err := c.GetKeyringID(keyctl.SessionKeyring, false)
			if ferr := <-got; ferr != nil {
				t.Fatal(ferr)
			}
			if err != nil || id != 42 {
				t.Fatalf("the first call: %v, %v; want 42", id, err)
			}
			if !errors.Is(c.SessionLost(), keyctl.EKEYREVOKED) {
				t.Fatalf("SessionLost: %v, want the attach's EKEYREVOKED", c.SessionLost())
			}
			if id, err := c.GetKeyringID(keyctl.SessionKeyring, false); err != nil || id != 43 {
				t.Fatalf("the second call: %v, %v; want 43", id, err)
			}
		})
	}
}

// A refusal, or a daemon that never answers the hello, is the first
// call's error, as a *HandshakeError that wraps what Dial would have
// returned; the client is closed then, and later calls fail too.
func TestDeferredHandshakeFailures(t *testing.T) {
	for _, mode := range deferredModes {
		t.Run(mode.name, func(t *testing.T) {
			path, ln := listenFake(t)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				wire.WriteFrame(conn, wire.EncodeRefusal(uint16(keyctl.EDQUOT)))
			}()
			c, err := Dial(path, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.GetKeyringID(keyctl.SessionKeyring, false)
			var he *HandshakeError
			var ce *Error
			if !errors.As(err, &he) || !errors.As(err, &ce) || ce.Op != "connect" || ce.Errno != keyctl.EDQUOT {
				t.Fatalf("a refused process's first call: %v, want a HandshakeError with connect: EDQUOT", err)
			}
			if _, err := c.GetKeyringID(keyctl.SessionKeyring, false); err == nil {
				t.Fatal("a call after a refusal succeeded")
			}

			saved := handshakeTimeout
			handshakeTimeout = 200 * time.Millisecond
			defer func() { handshakeTimeout = saved }()
			silent := make(chan net.Conn, 1)
			go func() {
				if conn, err := ln.Accept(); err == nil {
					silent <- conn
				}
			}()
			c2, err := Dial(path, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			_, err = c2.GetKeyringID(keyctl.SessionKeyring, false)
			if !errors.As(err, &he) || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a daemon that never answers the hello: %v, want a HandshakeError past the deadline", err)
			}
			(<-silent).Close()
		})
	}
}

// A request-key helper's token is never deferred: a request that went
// out behind a token the daemon refuses would be served with the
// helper's own authority. Dial waits for the token's answer.
func TestDeferredHandshakeNotForAHelper(t *testing.T) {
	path, ln := listenFake(t)
	t.Setenv(HelperEnv, "helper-token")
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 1<<16)
		wire.ReadFrame(conn, buf)
		body, err := wire.ReadFrame(conn, buf)
		if err != nil {
			return
		}
		r, _ := wire.DecodeRequest(body)
		wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
		b, _ := wire.AppendResponse(nil, &wire.Response{Tag: r.Tag, Errno: uint16(keyctl.EACCES)})
		wire.WriteFrame(conn, b)
	}()
	_, err := Dial(path, WithBlockingIO(), WithDeferredHandshake())
	if !errors.Is(err, keyctl.EACCES) {
		t.Fatalf("a helper whose token is refused: Dial returned %v, want EACCES", err)
	}
}
