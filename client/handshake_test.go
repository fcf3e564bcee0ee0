package client

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// A session to present goes out with the hello: the daemon has it before
// it answers the hello, so that dialling costs one round trip, not two.
// A refused token is SessionLost's, and the client still works. So on a
// blocking socket (WithBlockingIO), where the answer is waited for in the
// read itself.
func TestSessionGoesWithTheHello(t *testing.T) {
	t.Run("poller", func(t *testing.T) { sessionWithHello(t) })
	t.Run("blocking", func(t *testing.T) { sessionWithHello(t, WithBlockingIO()) })
}

func sessionWithHello(t *testing.T, opts ...Option) {
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer conn.Close()
		buf := make([]byte, 1<<16)
		if _, err := wire.ReadFrame(conn, buf); err != nil {
			got <- err
			return
		}
		// Before answering the hello: the attach must be here already.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		body, err := wire.ReadFrame(conn, buf)
		if err != nil {
			got <- errors.New("no request came with the hello: " + err.Error())
			return
		}
		r, err := wire.DecodeRequest(body)
		if err != nil || r.Op != wire.OpSessionAttach || string(r.Buf(0)) != "the-token" {
			got <- errors.New("the request with the hello is not the session's")
			return
		}
		conn.SetReadDeadline(time.Time{})
		got <- nil
		wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
		out, _ := wire.AppendResponse(nil, &wire.Response{Tag: r.Tag, Errno: uint16(keyctl.EKEYREVOKED)})
		wire.WriteFrame(conn, out)
		// One more request: the client goes on after a refused session.
		body, err = wire.ReadFrame(conn, buf)
		if err != nil {
			return
		}
		r, _ = wire.DecodeRequest(body)
		out, _ = wire.AppendResponse(nil, &wire.Response{Tag: r.Tag, Ints: []int64{42}})
		wire.WriteFrame(conn, out)
	}()
	t.Setenv(SessionEnv, "123:the-token")
	t.Setenv(HelperEnv, "")
	c, err := Dial(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(c.SessionLost(), keyctl.EKEYREVOKED) {
		t.Fatalf("SessionLost: %v", c.SessionLost())
	}
	if id, err := c.GetKeyringID(keyctl.SessionKeyring, false); err != nil || id != 42 {
		t.Fatalf("a call after the refused session: %v %v", id, err)
	}
}

// A daemon that accepts and never answers the hello (its descriptor table
// full, the connection waiting in its backlog) is reported once the
// handshake's time is up, on the poller's deadline or a blocking
// socket's receive timeout alike; and a daemon that goes away in the
// middle of a call ends the call, not the caller.
func TestSilentOrVanishingDaemon(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"poller", nil}, {"blocking", []Option{WithBlockingIO()}}} {
		t.Run(mode.name, func(t *testing.T) {
			path, ln := listenFake(t)
			saved := handshakeTimeout
			handshakeTimeout = 200 * time.Millisecond
			defer func() { handshakeTimeout = saved }()
			silent := make(chan net.Conn, 1)
			go func() {
				conn, err := ln.Accept()
				if err == nil {
					silent <- conn
				}
			}()
			_, err := Dial(path, mode.opts...)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a daemon that never answers: %v, want a deadline exceeded", err)
			}
			(<-silent).Close()

			// Hello answered, then the daemon closes instead of answering.
			answered := acceptOneCall(ln)
			go func() { (<-answered).Close() }()
			c, err := Dial(path, mode.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.GetKeyringID(keyctl.SessionKeyring, false); !errors.Is(err, io.EOF) {
				t.Fatalf("a call the daemon closed on: %v, want EOF", err)
			}
		})
	}
}

func TestBlockingIOExcludesPipelining(t *testing.T) {
	if _, err := Dial(filepath.Join(t.TempDir(), "none.sock"), WithBlockingIO(), WithPipelining()); err == nil {
		t.Fatal("WithBlockingIO and WithPipelining together: no error")
	}
}

// Close from another goroutine ends a call that waits for an answer that
// may never come (a NextNotification with no event): the call fails and
// Close returns, where Close used to wait for the call's lock, and a
// watcher that closed one connection while its reader waited hung
// (ukeyctl watch_session's watch_rm).
func TestCloseEndsAWaitingCall(t *testing.T) {
	path, ln := listenFake(t)
	held := acceptOneCall(ln) // and never answers it
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := c.NextNotification()
		called <- err
	}()
	conn := <-held
	defer conn.Close()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a call that had no answer coming")
	}
	if err := <-called; err == nil {
		t.Fatal("the waiting call returned no error after Close")
	}
}

// listenFake listens where a test's fake daemon answers, closed when the
// test ends, in an environment that names no session or helper token.
func listenFake(t *testing.T) (string, net.Listener) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	t.Setenv(SessionEnv, "")
	t.Setenv(HelperEnv, "")
	return path, ln
}

// acceptOneCall plays a daemon that accepts one connection, answers its
// hello, reads its first request and hands the connection over, the
// request unanswered.
func acceptOneCall(ln net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 1<<16)
		wire.ReadFrame(conn, buf)
		wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
		wire.ReadFrame(conn, buf)
		ch <- conn
	}()
	return ch
}
