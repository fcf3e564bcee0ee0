package client

import (
	"bytes"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// fakeDaemon speaks the protocol on a socket of its own: it answers the
// hello, then each request with answer(r), and counts the bytes it read.
func fakeDaemon(t *testing.T, answer func(r *wire.Request) *wire.Response) (path string, read *atomic.Int64) {
	t.Helper()
	path, read, _ = fakeDaemonOf(t, wire.Version, answer)
	return path, read
}

// fakeDaemonOf is fakeDaemon speaking versions up to highest: it agrees
// on the lower of that and the client's, as ukeyd does, and sends on
// hello the version the client said.
func fakeDaemonOf(t *testing.T, highest uint16, answer func(r *wire.Request) *wire.Response) (path string, read *atomic.Int64, hello <-chan uint16) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	read = new(atomic.Int64)
	said := make(chan uint16, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, wire.MaxFrame+4)
		body, err := wire.ReadFrame(conn, buf)
		if err != nil {
			return
		}
		v, _ := wire.DecodeHello(body)
		said <- v
		if wire.WriteFrame(conn, wire.EncodeHello(min(v, highest))) != nil {
			return
		}
		for {
			body, err := wire.ReadFrame(conn, buf)
			if err != nil {
				return
			}
			read.Add(int64(len(body)))
			r, err := wire.DecodeRequest(body)
			if err != nil {
				return
			}
			resp := answer(r)
			resp.Tag = r.Tag
			out, _ := wire.AppendResponse(nil, resp)
			if wire.WriteFrame(conn, out) != nil {
				return
			}
		}
	}()
	return path, read, said
}

// A payload the daemon refuses by its length is never sent: the client
// asks first, and the answer is add_key's.
func TestAddKeyAsksBeforeALargePayload(t *testing.T) {
	var mu sync.Mutex
	var ops []wire.Op
	path, read := fakeDaemon(t, func(r *wire.Request) *wire.Response {
		mu.Lock()
		ops = append(ops, r.Op)
		mu.Unlock()
		if r.Op == wire.OpAddKeyCheck && r.Int(0) > keyctl.MaxUserPayload {
			return &wire.Response{Errno: uint16(keyctl.EINVAL)}
		}
		return &wire.Response{Ints: []int64{7}}
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.AddKey("user", "big", bytes.Repeat([]byte{1}, 1<<20), keyctl.SessionKeyring)
	var e *Error
	if !errors.As(err, &e) || e.Errno != keyctl.EINVAL || e.Op != "add_key" {
		t.Fatalf("add of a refused payload: %v, want add_key: EINVAL", err)
	}
	if n := read.Load(); n > 1024 {
		t.Fatalf("the daemon read %d bytes for a payload it refused", n)
	}
	// A small payload goes at once, without a question.
	if _, err := c.AddKey("user", "small", []byte("x"), keyctl.SessionKeyring); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []wire.Op{wire.OpAddKeyCheck, wire.OpAddKey}; len(ops) != 2 || ops[0] != want[0] || ops[1] != want[1] {
		t.Fatalf("operations %v, want %v", ops, want)
	}
}

// A daemon that does not know the question (EOPNOTSUPP, as one older
// than it answers) is sent the payload.
func TestAddKeyCheckUnknownToTheDaemon(t *testing.T) {
	path, read := fakeDaemon(t, func(r *wire.Request) *wire.Response {
		if r.Op == wire.OpAddKeyCheck {
			return &wire.Response{Errno: uint16(keyctl.EOPNOTSUPP)}
		}
		return &wire.Response{Ints: []int64{7}}
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if id, err := c.AddKey("big_key", "big", make([]byte, 100<<10), keyctl.SessionKeyring); err != nil || id != 7 {
		t.Fatalf("add: %v %v", id, err)
	}
	if n := read.Load(); n < 100<<10 {
		t.Fatalf("the daemon read %d bytes, not the payload", n)
	}
}
