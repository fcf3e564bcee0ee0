package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// serveTemp serves svc on a socket in a temporary directory, with cfg.
func serveTemp(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	svc := keys.New()
	s := New(svc, cfg)
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
		svc.Close()
	})
	return s, path
}

// dialRaw connects and shakes hands.
func dialRaw(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := wire.WriteFrame(c, wire.EncodeHello(wire.Version)); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadFrame(c, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// call sends one request on c and returns the answer.
func call(t *testing.T, c net.Conn, r *wire.Request) *wire.Response {
	t.Helper()
	body, err := wire.AppendRequest(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteFrame(c, body); err != nil {
		t.Fatal(err)
	}
	b, err := wire.ReadFrame(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// After an add_key is answered, no byte of its payload stays in the
// connection's buffers: a bufio.Reader kept whole frames until they were
// overwritten, long after the key itself was destroyed.
func TestConnectionBuffersKeepNoPayload(t *testing.T) {
	s, path := serveTemp(t, Config{})
	c := dialRaw(t, path)
	marker := []byte("MARKER-payload-2f9e61-must-be-wiped")
	// A large request first (its buffer is dropped after it), then a
	// small one, read in place in the buffer the connection keeps.
	for i, p := range [][]byte{append(bytes.Repeat([]byte{'.'}, 9000), marker...), marker} {
		r := call(t, c, &wire.Request{Tag: uint32(i + 1), Op: wire.OpAddKey, Ints: []int64{int64(keys.UserKeyring)},
			Bufs: [][]byte{[]byte("user"), []byte("k"), p}})
		if r.Errno != 0 {
			t.Fatalf("add_key: errno %d", r.Errno)
		}
		id := r.Ints[0]
		if r := call(t, c, &wire.Request{Tag: 9, Op: wire.OpRead, Ints: []int64{id}}); r.Errno != 0 || !bytes.HasSuffix(r.Bufs[0], marker) {
			t.Fatalf("read: errno %d", r.Errno)
		}
		if r := call(t, c, &wire.Request{Tag: 10, Op: wire.OpUnlink, Ints: []int64{id, int64(keys.UserKeyring)}}); r.Errno != 0 {
			t.Fatalf("unlink: errno %d", r.Errno)
		}
	}
	// Only this test's connection: any other (serveTemp's probe) has
	// ended, and its teardown no longer touches buffers.
	var conns []*conn
	testutil.Eventually(t, "the other connections to end", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		conns = conns[:0]
		for sc := range s.conns {
			conns = append(conns, sc)
		}
		return len(conns) == 1
	})
	var held [][]byte
	for _, sc := range conns {
		// Once the connection is idle (marked so under its lock after its
		// last answer), its buffers are not touched until the next
		// request: reading them races with nothing.
		testutil.Eventually(t, "the connection to be idle", func() bool {
			sc.mu.Lock()
			defer sc.mu.Unlock()
			if sc.busy {
				return false
			}
			in := reflect.ValueOf(sc.sc.In).Elem().FieldByName("buf").Bytes()
			out := reflect.ValueOf(&sc.sc.Out).Elem().FieldByName("b").Bytes()
			held = append(held, bytes.Clone(in[:cap(in)]), bytes.Clone(out[:cap(out)]), bytes.Clone(sc.rbuf))
			return true
		})
	}
	for _, b := range held {
		if i := bytes.Index(b, marker[:16]); i >= 0 {
			t.Fatalf("a connection's buffer of %d bytes still holds the payload at %d", len(b), i)
		}
	}
}

// Strings end at their first NUL byte, as the kernel copies them from
// user space: "name\x00hidden" describes a key as "name".
func TestStringsEndAtNUL(t *testing.T) {
	_, path := serveTemp(t, Config{})
	c := dialRaw(t, path)
	r := call(t, c, &wire.Request{Tag: 1, Op: wire.OpAddKey, Ints: []int64{int64(keys.UserKeyring)},
		Bufs: [][]byte{[]byte("user\x00junk"), []byte("name\x00hidden"), []byte("v\x00binary")}})
	if r.Errno != 0 {
		t.Fatalf("add_key: errno %d", r.Errno)
	}
	id := r.Ints[0]
	d := call(t, c, &wire.Request{Tag: 2, Op: wire.OpDescribe, Ints: []int64{id}})
	if d.Errno != 0 || !strings.HasPrefix(string(d.Bufs[0]), "user;") || !strings.HasSuffix(string(d.Bufs[0]), ";name") {
		t.Fatalf("describe: %q (errno %d)", d.Bufs, d.Errno)
	}
	if p := call(t, c, &wire.Request{Tag: 3, Op: wire.OpRead, Ints: []int64{id}}); p.Errno != 0 || string(p.Bufs[0]) != "v\x00binary" {
		t.Fatalf("the payload is binary and kept whole: %q", p.Bufs)
	}
	f := call(t, c, &wire.Request{Tag: 4, Op: wire.OpSearch, Ints: []int64{int64(keys.UserKeyring), 0},
		Bufs: [][]byte{[]byte("user"), []byte("name\x00other")}})
	if f.Errno != 0 || f.Ints[0] != id {
		t.Fatalf("search for name\\x00other: %+v", f)
	}
	// The length limits apply to the string, not to what follows the NUL.
	long := append([]byte("short\x00"), bytes.Repeat([]byte{'x'}, keys.MaxDescription+10)...)
	if r := call(t, c, &wire.Request{Tag: 5, Op: wire.OpAddKey, Ints: []int64{int64(keys.UserKeyring)},
		Bufs: [][]byte{[]byte("user"), long, []byte("v")}}); r.Errno != 0 {
		t.Fatalf("a short description followed by a NUL and 4 KiB: errno %d", r.Errno)
	}
}

// A flood of refused connections costs a few log lines, not one each.
func TestRefusalsAreRateLimited(t *testing.T) {
	var logs testutil.Buffer
	_, path := serveTemp(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Limits: Limits{MaxConnsPerUID: 1}})
	dialRaw(t, path) // holds this uid's one connection
	for range 50 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := wire.ReadFrame(c, nil)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		var refused *wire.Refused
		if _, err := wire.DecodeHello(b); !errors.As(err, &refused) || refused.Errno != uint16(keys.EDQUOT) {
			t.Fatalf("a connection over the uid's bound: %v, want a refusal with EDQUOT", err)
		}
	}
	if n := strings.Count(logs.String(), "refusing connection"); n == 0 || n > 5 {
		t.Fatalf("%d log lines for 50 refused connections:\n%s", n, logs.String())
	}
}

// A uid runs one expensive operation at a time, and the daemon at most
// MaxExpensive: the others wait their turn.
func TestExpensiveOperationsBounded(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{Limits: Limits{MaxExpensive: 3, MaxExpensivePerUID: 1}})
	var mu sync.Mutex
	running := map[uint32]int{}
	peakPerUID, peak, total := 0, 0, 0
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range 12 {
		uid := uint32(1000 + i%4) // four uids, three operations each
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.expensive(uid, func() {
				mu.Lock()
				running[uid]++
				total++
				peakPerUID = max(peakPerUID, running[uid])
				peak = max(peak, total)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				running[uid]--
				total--
				mu.Unlock()
			})
			if err != nil {
				t.Error(err)
			}
			done.Add(1)
		}()
	}
	wg.Wait()
	if done.Load() != 12 || peakPerUID != 1 || peak > 3 {
		t.Fatalf("%d done; at most %d at once for one uid (bound 1), %d in all (bound 3)", done.Load(), peakPerUID, peak)
	}
	// Shutting down ends the waits with EINTR.
	s.mu.Lock()
	slot := s.usage.of(7).expensive
	s.mu.Unlock()
	slot <- struct{}{}
	errc := make(chan error, 1)
	go func() { errc <- s.expensive(7, func() {}) }()
	testutil.StillBlocked(t, "a second operation of a uid with one running", errc)
	s.Shutdown(context.Background())
	if err := <-errc; err != keys.EINTR {
		t.Fatalf("a wait at shutdown: %v, want EINTR", err)
	}
}

// A client that sends its first request with its hello (as
// client.WithDeferredHandshake does) gets the hello and the answer in
// one write: one read returns both. A client that sends the hello alone
// gets it at once.
func TestHelloGoesWithTheFirstAnswer(t *testing.T) {
	_, path := serveTemp(t, Config{})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, _ := wire.AppendFrame(nil, wire.EncodeHello(wire.Version))
	body, _ := wire.AppendRequest(nil, &wire.Request{Tag: 7, Op: wire.OpGetKeyringID, Ints: []int64{int64(keys.UserKeyring), 1}})
	out, _ = wire.AppendFrame(out, body)
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	hello, err := wire.ReadFrame(bytes.NewReader(buf[:n]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := wire.DecodeHello(hello); err != nil || v != wire.Version {
		t.Fatalf("hello: %v, %v", v, err)
	}
	rest := buf[4+len(hello) : n]
	if len(rest) == 0 {
		t.Fatal("the hello came alone, before the answer to the request sent with it")
	}
	b, err := wire.ReadFrame(bytes.NewReader(rest), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := wire.DecodeResponse(b); err != nil || r.Tag != 7 || r.Errno != 0 || len(r.Ints) != 1 || r.Ints[0] <= 0 {
		t.Fatalf("the answer with the hello: %+v, %v", r, err)
	}

	c2, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := wire.WriteFrame(c2, wire.EncodeHello(wire.Version)); err != nil {
		t.Fatal(err)
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := wire.ReadFrame(c2, nil); err != nil {
		t.Fatalf("a hello sent alone got no answer: %v", err)
	}
}
