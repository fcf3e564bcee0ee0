package sock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair returns the two ends of a connected Unix stream socket, each
// under the runtime's poller.
func pair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	a, b := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// whole reports whether every byte of b's backing array is zero.
func whole(b []byte) bool { return bytes.Count(b[:cap(b)], []byte{0}) == cap(b) }

func TestFrames(t *testing.T) {
	var f Frames
	req := &wire.Request{Tag: 7, Op: wire.OpRead, Ints: []int64{-3}}
	resp := &wire.Response{Tag: 7, Bufs: [][]byte{[]byte("secret payload")}}
	if err := f.Request(req); err != nil {
		t.Fatal(err)
	}
	if err := f.Response(resp); err != nil {
		t.Fatal(err)
	}
	if err := f.Body(wire.EncodeHello(wire.Version)); err != nil {
		t.Fatal(err)
	}
	// What was appended reads back as the three frames.
	r := wire.NewReader(bytes.NewReader(bytes.Clone(f.Bytes())), 64)
	b, err := r.Next()
	if got, _ := wire.DecodeRequest(b); err != nil || got.Tag != 7 || got.Op != wire.OpRead {
		t.Fatalf("request: %+v %v", got, err)
	}
	b, err = r.Next()
	if got, _ := wire.DecodeResponse(b); err != nil || string(got.Bufs[0]) != "secret payload" {
		t.Fatalf("response: %+v %v", got, err)
	}
	b, err = r.Next()
	if v, _ := wire.DecodeHello(b); err != nil || v != wire.Version {
		t.Fatalf("hello %x %v", b, err)
	}

	// Truncate wipes what it drops.
	n := f.Len()
	f.Body([]byte("more secret"))
	tail := f.Bytes()[n:]
	f.Truncate(n)
	if f.Len() != n || !whole(tail[:0:len(tail)]) {
		t.Fatalf("truncate left %q", tail)
	}
	// Reset wipes, and keeps a small buffer.
	buf := f.Bytes()
	if dropped := f.Reset(); dropped || f.Len() != 0 || f.Cap() == 0 || !whole(buf[:0]) {
		t.Fatalf("reset: dropped %v, %d/%d, wiped %v", dropped, f.Len(), f.Cap(), whole(buf[:0]))
	}
	f.Reset()
	// A frame too large is refused and leaves nothing behind.
	big := &wire.Response{Bufs: [][]byte{bytes.Repeat([]byte("s"), wire.MaxFrame)}}
	if err := f.Response(big); !errors.Is(err, wire.ErrFrameTooLarge) || f.Len() != 0 {
		t.Fatalf("oversized: %v, %d bytes", err, f.Len())
	}
	if bytes.Contains(f.Bytes()[:cap(f.Bytes())], []byte("ssss")) {
		t.Fatal("the refused frame's bytes are still in the buffer")
	}
	// One large frame: wiped, and its buffer dropped.
	f.Body(bytes.Repeat([]byte("L"), KeepMax))
	buf = f.Bytes()
	if dropped := f.Reset(); !dropped || f.Cap() != 0 || !whole(buf[:0]) {
		t.Fatalf("large reset: dropped %v, cap %d, wiped %v", dropped, f.Cap(), whole(buf[:0]))
	}
}

func TestRecycle(t *testing.T) {
	b := append(make([]byte, 0, 100), "payload"...)
	if r := Recycle(b); len(r) != 0 || cap(r) != 100 || !whole(b[:0]) {
		t.Fatalf("%d/%d %q", len(r), cap(r), b[:cap(b)])
	}
	big := append(make([]byte, 0, KeepMax+1), "payload"...)
	if r := Recycle(big); r != nil || !whole(big[:0]) {
		t.Fatal("a large buffer was kept, or not wiped")
	}
	if Recycle(nil) != nil {
		t.Fatal("nil")
	}
}

// A round trip as the client makes it: the request goes out in the raw
// read, the wait ends when the answer is there, the reader reads it.
func TestFlushAndWait(t *testing.T) {
	a, b := pair(t)
	c, err := New(a, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer c.In.Release()
	peer := wire.NewReader(b, 256)
	served := make(chan struct{})
	go func() {
		defer close(served)
		body, err := peer.Next()
		if err != nil {
			return
		}
		req, _ := wire.DecodeRequest(body)
		peer.Done()
		time.Sleep(20 * time.Millisecond) // the answer comes while the client waits
		var f Frames
		f.Response(&wire.Response{Tag: req.Tag, Ints: []int64{42}})
		b.Write(f.Bytes())
	}()
	c.Out.Request(&wire.Request{Tag: 9, Op: wire.OpRevoke, Ints: []int64{5}})
	ran := false
	stopped, dropped, err := c.FlushAndWait(func() bool { ran = true; return false })
	if err != nil || stopped || dropped || !ran || c.Out.Len() != 0 {
		t.Fatalf("stopped %v dropped %v err %v then ran %v, %d left", stopped, dropped, err, ran, c.Out.Len())
	}
	if !c.In.WholeFrameBuffered() {
		t.Fatal("FlushAndWait woke without taking the answer that woke it")
	}
	body, err := c.In.Next()
	if resp, _ := wire.DecodeResponse(body); err != nil || resp.Tag != 9 || resp.Ints[0] != 42 {
		t.Fatalf("%+v %v", resp, err)
	}
	c.In.Done()
	<-served
	peer.Release()
}

// then returning true ends the wait at once: a server whose connection
// is to close does not wait for another request.
func TestFlushAndWaitStops(t *testing.T) {
	a, b := pair(t)
	c, _ := New(a, 256)
	c.Out.Body([]byte("bye"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopped, _, err := c.FlushAndWait(func() bool { return true })
		if !stopped || err != nil {
			t.Errorf("stopped %v err %v", stopped, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("FlushAndWait waited although then said stop")
	}
	got, err := wire.NewReader(b, 64).Next()
	if err != nil || string(got) != "bye" {
		t.Fatalf("%q %v", got, err)
	}
}

// Frames larger than the socket's buffer: the rest goes out the plain way
// while the peer reads, and nothing is lost or reordered.
func TestFlushAndWaitFullSocket(t *testing.T) {
	a, b := pair(t)
	c, _ := New(a, 256)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: more than a socket holds
	c.Out.Response(&wire.Response{Tag: 1, Bufs: [][]byte{payload}})
	got := make(chan []byte, 1)
	go func() {
		r := wire.NewReader(b, 64)
		body, err := r.Next()
		if err != nil {
			got <- nil
			return
		}
		got <- bytes.Clone(body)
		r.Release()
		b.Write([]byte{0, 0, 0, 1, 'k'})
	}()
	stopped, dropped, err := c.FlushAndWait(nil)
	if err != nil || stopped || !dropped {
		t.Fatalf("stopped %v dropped %v err %v", stopped, dropped, err)
	}
	resp, err := wire.DecodeResponse(<-got)
	if err != nil || !bytes.Equal(resp.Bufs[0], payload) {
		t.Fatalf("the peer got %v", err)
	}
	if body, err := c.In.Next(); err != nil || string(body) != "k" {
		t.Fatalf("%q %v", body, err)
	}
}

// A closed peer ends the wait with the error the next read would give,
// and a read deadline ends it too.
func TestFlushAndWaitEnds(t *testing.T) {
	a, b := pair(t)
	c, _ := New(a, 256)
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	c.Out.Body([]byte("x"))
	if _, _, err := c.FlushAndWait(nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
	a.SetReadDeadline(time.Time{})
	b.Close()
	c.Out.Body([]byte("y"))
	_, _, err := c.FlushAndWait(nil)
	if err == nil {
		_, err = c.In.Next()
	}
	if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET)) {
		t.Fatalf("after the peer closed: %v", err)
	}
}

// Conn runs on a *net.UnixConn as well as on an *os.File.
func TestOnUnixConn(t *testing.T) {
	a, b := pair(t)
	fc, err := net.FileConn(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	c, err := New(fc.(*net.UnixConn), 64)
	if err != nil {
		t.Fatal(err)
	}
	c.Out.Body([]byte("hello"))
	if _, err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, err := wire.NewReader(b, 64).Next(); err != nil || string(got) != "hello" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := Deadline{Timeout: 80 * time.Second}
	for _, c := range []struct {
		after time.Duration
		due   bool
		at    time.Duration // from t0
	}{
		{0, true, 80 * time.Second},                // the first is always set
		{5 * time.Second, false, 80 * time.Second}, // within the eighth: left alone
		{10 * time.Second, false, 80 * time.Second},
		{10*time.Second + 1, true, 90*time.Second + 1}, // past it: moved
		{11 * time.Second, false, 90*time.Second + 1},
	} {
		at, due := d.Renew(t0.Add(c.after))
		if due != c.due || !at.Equal(t0.Add(c.at)) {
			t.Errorf("after %v: %v %v, want %v %v", c.after, at.Sub(t0), due, c.at, c.due)
		}
	}
	var none Deadline
	if _, due := none.Renew(t0); due {
		t.Error("a zero timeout set a deadline")
	}
}

// Any sequence of appends, truncations and resets leaves Bytes a
// sequence of whole frames, each as appended, and a reset buffer wiped.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{0, 5, 1, 200, 2, 3, 0, 1})
	f.Add([]byte{1, 255, 1, 255, 1, 255, 3})
	f.Fuzz(func(t *testing.T, script []byte) {
		var fr Frames
		var want [][]byte // the bodies appended, in order
		var ends []int    // the length after each
		for i := 0; i+1 < len(script); i += 2 {
			arg := int(script[i+1])
			switch script[i] % 4 {
			case 0, 1: // a body of arg bytes, or arg KiB
				n := arg
				if script[i]%4 == 1 {
					n = arg << 10
				}
				body := bytes.Repeat([]byte{byte(i) | 1}, n)
				if err := fr.Body(body); err != nil {
					t.Fatal(err)
				}
				want = append(want, body)
				ends = append(ends, fr.Len())
			case 2: // drop the last arg%3 frames
				k := min(arg%3, len(want))
				want, ends = want[:len(want)-k], ends[:len(ends)-k]
				n := 0
				if len(ends) > 0 {
					n = ends[len(ends)-1]
				}
				old := fr.Bytes()
				fr.Truncate(n)
				if !whole(old[n:n:cap(old)]) {
					t.Fatal("truncate left bytes behind")
				}
			case 3:
				old := fr.Bytes()
				dropped := fr.Reset()
				if !whole(old[:0]) || fr.Len() != 0 || dropped != (cap(old) > KeepMax) {
					t.Fatalf("reset: dropped %v of %d", dropped, cap(old))
				}
				want, ends = nil, nil
			}
		}
		r := wire.NewReader(bytes.NewReader(bytes.Clone(fr.Bytes())), 64)
		for i, w := range want {
			got, err := r.Next()
			if err != nil || !bytes.Equal(got, w) {
				t.Fatalf("frame %d: %d bytes, %v; want %d", i, len(got), err, len(w))
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("after the frames: %v", err)
		}
	})
}

// Descriptors passed with a frame are received where AcceptFDs allows,
// up to its bound; the rest are closed, and without it none is kept.
func TestPassedDescriptors(t *testing.T) {
	a, b := pair(t)
	c, _ := New(a, 256)
	c.AcceptFDs(1)
	var r [2]int
	if err := unix.Pipe(r[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(r[0])
	defer unix.Close(r[1])
	var f Frames
	f.Body([]byte("take this"))
	bfd := int(b.Fd())
	if err := unix.Sendmsg(bfd, f.Bytes(), unix.UnixRights(r[0], r[1]), nil, 0); err != nil {
		t.Fatal(err)
	}
	body, err := c.In.Next()
	if err != nil || string(body) != "take this" {
		t.Fatalf("%q %v", body, err)
	}
	fd, ok := c.TakeFD()
	if !ok {
		t.Fatal("no descriptor")
	}
	defer unix.Close(fd)
	if _, ok := c.TakeFD(); ok {
		t.Fatal("a second descriptor past the bound")
	}
	// The one taken is the pipe's read end: what is written comes out.
	unix.Write(r[1], []byte("x"))
	var got [1]byte
	if n, err := unix.Read(fd, got[:]); n != 1 || err != nil || got[0] != 'x' {
		t.Fatalf("read %d %v %q", n, err, got)
	}
	c.CloseFDs()
}

// A Conn set to spin polls only once a wait was shorter than its spin,
// stops after a peer that answered later, and starts again after a quick
// one; frames arrive whole either way, on a socket under the poller and
// on a blocking one, and a peer that goes while it polls is met as
// without the poll. On one processor it never polls.
func TestSpin(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("SetSpin does nothing on one processor")
	}
	// Long enough that a wait of an answer sent at once is shorter on a
	// loaded machine, short enough for the test to wait out.
	const spin = 200 * time.Millisecond
	delays := []time.Duration{0, 0, 0, 2 * spin, 0, 0}
	for _, blocking := range []bool{false, true} {
		t.Run(fmt.Sprint("blocking=", blocking), func(t *testing.T) {
			a, b := pair(t)
			c, err := New(a, 256)
			if err != nil {
				t.Fatal(err)
			}
			defer c.In.Release()
			if blocking {
				a.Fd() // makes the descriptor blocking
				c.SetBlocking()
			}
			c.SetSpin(spin)
			peer := wire.NewReader(b, 256)
			served := make(chan struct{})
			go func() {
				defer close(served)
				defer peer.Release()
				for _, d := range delays {
					body, err := peer.Next()
					if err != nil {
						return
					}
					req, _ := wire.DecodeRequest(body)
					peer.Done()
					time.Sleep(d)
					var f Frames
					f.Response(&wire.Response{Tag: req.Tag, Ints: []int64{req.Ints[0] * 2}})
					b.Write(f.Bytes())
				}
				// One more request, answered by going away.
				if _, err := peer.Next(); err == nil {
					peer.Done()
				}
				b.Close()
			}()
			for i := range delays {
				c.Out.Request(&wire.Request{Tag: uint32(i + 1), Op: wire.OpRevoke, Ints: []int64{int64(i)}})
				if _, _, err := c.FlushAndWait(nil); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if polled, want := c.x.spin > 0, i > 0 && delays[i-1] < spin; polled != want {
					t.Fatalf("call %d polled %v, want %v", i, polled, want)
				}
				body, err := c.In.Next()
				resp, _ := wire.DecodeResponse(body)
				if err != nil || resp.Tag != uint32(i+1) || len(resp.Ints) != 1 || resp.Ints[0] != int64(2*i) {
					t.Fatalf("call %d: %+v %v", i, resp, err)
				}
				c.In.Done()
			}
			c.Out.Request(&wire.Request{Tag: 99, Op: wire.OpRevoke, Ints: []int64{0}})
			_, _, err = c.FlushAndWait(nil)
			if c.x.spin == 0 {
				t.Fatal("the last call did not poll")
			}
			if err == nil {
				_, err = c.In.Next()
			}
			if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET)) {
				t.Fatalf("after the peer went: %v", err)
			}
			<-served
		})
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var c Conn
	if c.SetSpin(spin); c.spin != 0 {
		t.Fatalf("one processor: spin %v", c.spin)
	}
}

// Frames that outgrow their buffer move to a larger one, and the one
// they leave is wiped: answers coalesced into one write carry payloads,
// and the array that held the earlier ones went to Go's collector with
// them, which no Reset reached.
func TestFramesWipeTheBufferTheyOutgrow(t *testing.T) {
	secret := bytes.Repeat([]byte("S3CRET-"), 400)
	var f Frames
	if err := f.Response(&wire.Response{Tag: 1, Bufs: [][]byte{secret}}); err != nil {
		t.Fatal(err)
	}
	first := f.Bytes()[:cap(f.Bytes())]
	if err := f.Response(&wire.Response{Tag: 2, Bufs: [][]byte{make([]byte, 4000)}}); err != nil {
		t.Fatal(err)
	}
	if &first[0] == &f.Bytes()[0] {
		t.Fatal("the frames did not outgrow their first buffer")
	}
	if bytes.Contains(first, secret[:64]) {
		t.Error("the buffer the frames outgrew still holds the first answer's payload")
	}
	if !bytes.Contains(f.Bytes(), secret) {
		t.Error("the first answer was lost in the move")
	}
	f.Reset()
}
