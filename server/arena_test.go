package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// A connection's buffers are secmem's arena's (its frames carry
// payloads), and every way a connection ends gives them back: once the
// connections below have ended, the arena holds what it held before
// they began. Each grows its buffers beyond the small allowance first
// (a large request, a large answer, a large read buffer), then ends: the
// client closes, mid-frame or with requests unanswered; it sends a
// malformed request or a frame beyond the bound; the server shuts down
// under idle connections with a frame begun; the daemon hands its
// connections over (one with a frame begun, whose bytes cross to the new
// daemon) and the new one shuts down. A freed chunk is the next
// allocation's: a buffer used after it was freed would show up here as a
// wrong answer, and under -race as a race.
func TestConnectionBuffersFreed(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	svc := keys.New()
	s := New(svc, Config{Logger: quiet})
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer svc.Close()

	// The keys read are made first: their payloads are the arena's for
	// as long as they live.
	setup := dialRaw(t, path)
	big := bytes.Repeat([]byte("0123456789abcdef"), 2000) // 32000 bytes: a large answer
	ids := map[string]int64{}
	for name, p := range map[string][]byte{"small": []byte("payload"), "big": big} {
		r := call(t, setup, &wire.Request{Tag: 1, Op: wire.OpAddKey, Ints: []int64{int64(keys.UserKeyring)},
			Bufs: [][]byte{[]byte("user"), []byte(name), p}})
		if r.Errno != 0 {
			t.Fatalf("add_key %s: errno %d", name, r.Errno)
		}
		ids[name] = r.Ints[0]
		if r := call(t, setup, &wire.Request{Tag: 2, Op: wire.OpSetPerm, Ints: []int64{r.Ints[0], int64(keys.PermMask)}}); r.Errno != 0 {
			t.Fatalf("setperm: errno %d", r.Errno)
		}
	}
	setup.Close()
	connsOf := func(s *Server) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns)
	}
	testutil.Eventually(t, "the setup connection to end", func() bool { return connsOf(s) == 0 })
	start := secmem.Stats().InUse
	freed := func(what string) {
		t.Helper()
		testutil.Eventually(t, "the connections to end", func() bool { return connsOf(s) == 0 })
		testutil.Eventually(t, what+": the arena's chunks to be freed", func() bool { return secmem.Stats().InUse <= start })
	}

	// A request larger than the small allowance (ENOKEY: nothing kept),
	// reads of a large payload and a small one, then a close.
	large := func(c net.Conn) {
		t.Helper()
		r := call(t, c, &wire.Request{Tag: 3, Op: wire.OpAddKey, Ints: []int64{999999},
			Bufs: [][]byte{[]byte("user"), []byte("x"), bytes.Repeat([]byte{'p'}, 30000)}})
		if r.Errno != uint16(keys.ENOKEY) {
			t.Fatalf("add_key to no keyring: errno %d", r.Errno)
		}
		for range 3 {
			for name, want := range map[string][]byte{"big": big, "small": []byte("payload")} {
				r := call(t, c, &wire.Request{Tag: 4, Op: wire.OpRead, Ints: []int64{ids[name]}})
				if r.Errno != 0 || !bytes.Equal(r.Bufs[0], want) {
					t.Fatalf("read %s: errno %d, %d bytes", name, r.Errno, len(r.Bufs[0]))
				}
			}
		}
	}
	frame := func(r *wire.Request) []byte {
		body, err := wire.AppendRequest(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := wire.AppendFrame(nil, body)
		return f
	}
	readBig := frame(&wire.Request{Tag: 5, Op: wire.OpRead, Ints: []int64{ids["big"]}})
	addLarge := frame(&wire.Request{Tag: 6, Op: wire.OpAddKey, Ints: []int64{999999},
		Bufs: [][]byte{[]byte("user"), []byte("x"), bytes.Repeat([]byte{'q'}, 200000)}})

	c := dialRaw(t, path)
	large(c)
	c.Close()
	freed("a close between requests")

	c = dialRaw(t, path)
	large(c)
	c.Write(addLarge[:100000]) // a large frame begun, never finished
	c.Close()
	freed("a close mid-frame")

	c = dialRaw(t, path)
	large(c)
	// Pipelined reads whose answers nobody reads: the connection ends
	// while they are written, or with them gathered.
	c.Write(bytes.Repeat(readBig, 8))
	c.Close()
	freed("a close with answers owed")

	c = dialRaw(t, path)
	large(c)
	bad := binary.BigEndian.AppendUint32(nil, 3)
	c.Write(append(bad, 1, 2, 3)) // not even a request's header
	io.Copy(io.Discard, c)        // until the server closes
	c.Close()
	freed("a malformed request")

	c = dialRaw(t, path)
	large(c)
	c.Write(binary.BigEndian.AppendUint32(nil, wire.MaxFrame+1))
	io.Copy(io.Discard, c)
	c.Close()
	freed("a frame beyond the bound")

	// A hand-over: the old daemon's connections end there (handed
	// over), one of them with a large frame begun, whose bytes the new
	// daemon takes and serves once the client finishes it.
	c1, c2 := dialRaw(t, path), dialRaw(t, path)
	large(c1)
	large(c2)
	c2.Write(addLarge[:150000])
	res, err := takeOver(path, nil, Config{Logger: quiet}, takeoverFault{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != ErrHandedOver {
		t.Fatalf("the old daemon's Serve: %v", err)
	}
	c2.Write(addLarge[150000:])
	if r := readAnswer(t, c2); r.Tag != 6 || r.Errno != uint16(keys.ENOKEY) {
		t.Fatalf("the frame begun before the hand-over, answered after: tag %d errno %d", r.Tag, r.Errno)
	}
	// The new daemon's: a large read, an idle connection with a large
	// frame begun, then shutdown.
	c3 := dialViaListener(t, res)
	large(c3)
	c3.Write(addLarge[:120000])
	large(c1)
	time.Sleep(10 * time.Millisecond) // the frame begun, read in part
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	for _, l := range res.Listeners {
		l.Close()
	}
	c1.Close()
	c2.Close()
	c3.Close()
	s = res.Server
	// The new daemon holds the keys' payloads too, in chunks of their
	// own (keys.newPayload: the record and the bytes), while the old
	// one's keep theirs until its process exits.
	start += 2*int64(unsafe.Sizeof(keys.Payload{})) + int64(len("payload")+len(big))
	freed("a hand-over, then shutdown")
	res.Service.Close()
}

// readAnswer reads one answer from c.
func readAnswer(t *testing.T, c net.Conn) *wire.Response {
	t.Helper()
	b, err := wire.ReadFrame(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.DecodeResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// dialViaListener serves the listeners a take-over returned (until they
// close) and connects to the first.
func dialViaListener(t *testing.T, res *TakeoverResult) net.Conn {
	t.Helper()
	for _, l := range res.Listeners {
		go res.Server.Serve(l)
	}
	return dialRaw(t, res.Listeners[0].Addr().String())
}
