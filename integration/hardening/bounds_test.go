package hardening

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// hogConns are the connections an agent holds for the hog operations.
var hogConns []net.Conn

// hogDial connects to the daemon and, unless hello is false, shakes
// hands with protocol version v.
func hogDial(hello bool, v uint16) (net.Conn, error) {
	c, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET"))
	if err != nil || !hello {
		return c, err
	}
	if err := wire.WriteFrame(c, wire.EncodeHello(v)); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := wire.ReadFrame(c, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// addKeyFrame is a whole add_key request for a big_key of n bytes.
func addKeyFrame(tag uint32, n int) []byte {
	body, _ := wire.AppendRequest(nil, &wire.Request{Tag: tag, Op: wire.OpAddKey, Ints: []int64{int64(keys.SessionKeyring)},
		Bufs: [][]byte{[]byte("big_key"), []byte("hog-" + strconv.Itoa(int(tag))), bytes.Repeat([]byte{0x41}, n)}})
	f, _ := wire.AppendFrame(nil, body)
	return f
}

// runHog runs the agent operations that try to make the daemon hold
// memory or a connection:
//
//	hogpart A B   A connections each send all but the last byte of an
//	              add_key frame of B payload bytes, and hold; N counts them
//	hogfull B     one connection sends a whole add_key of B bytes; the
//	              reply is the daemon's answer
//	hogprehello B one connection sends a frame of B bytes before any
//	              hello; N is 1 if the daemon closed it
//	hogstuff A B  one connection (pipelining) asks to read key B A times
//	              and never reads an answer
func runHog(c call) reply {
	switch c.Op {
	case "hogpart":
		n := 0
		for i := range c.A {
			conn, err := hogDial(true, wire.Version)
			if err != nil {
				return reply{Errno: -1, Err: err.Error(), N: int64(n)}
			}
			hogConns = append(hogConns, conn)
			f := addKeyFrame(uint32(i+1), int(c.B))
			if _, err := conn.Write(f[:len(f)-1]); err != nil {
				return reply{Errno: -1, Err: err.Error(), N: int64(n)}
			}
			n++
		}
		return reply{N: int64(n)}
	case "hogfull":
		conn, err := hogDial(true, wire.Version)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		defer conn.Close()
		if _, err := conn.Write(addKeyFrame(7, int(c.B))); err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		b, err := wire.ReadFrame(conn, nil)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		resp, err := wire.DecodeResponse(b)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		return reply{Errno: int(resp.Errno), Ints: resp.Ints}
	case "hogprehello":
		conn, err := hogDial(false, 0)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		defer conn.Close()
		f := addKeyFrame(1, int(c.B))
		conn.Write(f[:len(f)/2])
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			return reply{N: 1}
		}
		return reply{}
	case "hogstuff":
		conn, err := hogDial(true, 1)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		hogConns = append(hogConns, conn)
		var frames []byte
		for i := range c.A {
			body, _ := wire.AppendRequest(nil, &wire.Request{Tag: uint32(i + 1), Op: wire.OpRead, Ints: []int64{c.B}})
			frames, _ = wire.AppendFrame(frames, body)
		}
		// Written in the background: once the daemon stops reading (its
		// answers are not read), the rest waits.
		go conn.Write(frames)
		return reply{}
	}
	return reply{Errno: -1, Err: "agent: unknown op " + c.Op}
}

func isReset(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se)
}

// heapInUse returns the bytes of live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// A uid may have the daemon hold only so much of its requests in memory:
// connections that each send most of a megabyte-long add_key and stop
// make the daemon hold at most the uid's bound; a whole request beyond it
// is answered with EDQUOT; nothing larger than a hello is read before the
// hello; and another uid is served throughout.
func TestRequestMemoryBoundedPerUID(t *testing.T) {
	needRoot(t)
	const perUID = 4 << 20
	d := startDaemon(t, daemonConfig{limits: server.Limits{MaxBufferedPerUID: perUID, MaxBuffered: 64 << 20}})
	hog := startAgent(t, d, asOwner)
	victim := startAgent(t, d, asOther)
	before := heapInUse()
	const conns, size = 32, 1 << 20
	if r := hog.one(call{Op: "hogpart", A: conns, B: size}); r.Errno != 0 || r.N != conns {
		t.Fatalf("hogpart: %+v", r)
	}
	// The daemon has read what the socket buffers do not hold.
	testutil.Eventually(t, "the daemon to read the partial requests", func() bool {
		n, _ := strconv.Atoi(d.status(t, "buffered_bytes"))
		return n >= perUID-size-64<<10
	})
	grown := heapInUse() - before
	if n, _ := strconv.Atoi(d.status(t, "buffered_bytes")); n > perUID {
		t.Fatalf("the daemon holds %d bytes of one uid's requests, above its bound of %d", n, perUID)
	}
	if grown > 2*perUID+conns*64<<10 {
		t.Fatalf("the heap grew by %d bytes for %d partial requests of %d bytes; the uid's bound is %d", grown, conns, size, perUID)
	}
	if r := hog.one(call{Op: "hogfull", B: size}); r.Errno != int(keys.EDQUOT) {
		t.Fatalf("a whole request beyond the uid's bound: %+v, want EDQUOT", r)
	}
	if r := hog.one(call{Op: "hogprehello", B: size}); r.N != 1 {
		t.Fatalf("a megabyte frame before the hello did not close the connection: %+v", r)
	}
	// Another uid still adds and reads a big key.
	rs := victim.do(call{Op: "add", A: int64(keys.SessionKeyring), S: "big_key", T: "v", P: bytes.Repeat([]byte{1}, 512<<10)})
	if rs[0].Errno != 0 {
		t.Fatalf("another uid's large add_key: %+v", rs[0])
	}
	if r := victim.one(call{Op: "read", A: rs[0].N}); r.Errno != 0 || len(r.Out) != 512<<10 {
		t.Fatalf("another uid's read: errno %d, %d bytes (%s)\nthe daemon's log:\n%s", r.Errno, len(r.Out), r.Err, d.logs)
	}
	t.Logf("%d partial requests of %d bytes: the heap grew by %d bytes (bound %d)", conns, size, grown, perUID)
}

// stuff has an agent ask, on a connection of its own, for 200 answers
// of 32 KB each and read none, while the test keeps a connection open as
// the key's owner.
func stuff(t *testing.T, d *daemon) {
	t.Helper()
	owner := d.dial(t)
	key, err := owner.AddKey("user", "large", bytes.Repeat([]byte{7}, 32000), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.SetPerm(key, keys.PermMask); err != nil {
		t.Fatal(err)
	}
	stuffer := startAgent(t, d, asOwner)
	if r := stuffer.one(call{Op: "hogstuff", A: 200, B: int64(key)}); r.Errno != 0 {
		t.Fatalf("hogstuff: %+v", r)
	}
}

// An answer that its client never reads holds the connection for the
// write timeout at most, and does not hold up a shutdown: the daemon
// stops within a moment, not after the timeout.
func TestUnreadAnswersDoNotPinTheDaemon(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{writeTimeout: 10 * time.Minute})
	stuff(t, d)
	testutil.Eventually(t, "the daemon's answers to fill the socket", func() bool {
		return d.status(t, "connections") == "4" // owner, the stuffer's client and its pipelined connection, this status
	})
	time.Sleep(200 * time.Millisecond) // the daemon is blocked writing by now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an unread answer in flight: %v", err)
	}
}

// With a short write timeout, the connection whose answers are not read
// is closed, and its uid's count goes down.
func TestWriteTimeoutClosesTheConnection(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{writeTimeout: 300 * time.Millisecond})
	stuff(t, d)
	// The stuffer's own client and its pipelined connection, the owner,
	// and this status: 4 while stuck; 3 once the stuck one is closed.
	testutil.Eventually(t, "the unread connection to be closed", func() bool {
		return d.status(t, "connections") == "3"
	})
}

// dhOperands adds a prime of size bytes, a base and a private key for a
// dh_compute as the agent's uid, and returns their serials.
func dhOperands(t testing.TB, a *agent, size int) (priv, prime, base int64) {
	t.Helper()
	num := func(seed byte) []byte {
		b := bytes.Repeat([]byte{seed, 0x5a, 0xc3, 0x91}, size/4)
		b[0] |= 0x80
		b[len(b)-1] |= 1
		return b
	}
	s := int64(keys.UserKeyring)
	rs := a.do(
		call{Op: "add", A: s, S: "user", T: "dh-priv", P: num(0x17)},
		call{Op: "add", A: s, S: "user", T: "dh-prime", P: num(0xe5)},
		call{Op: "add", A: s, S: "user", T: "dh-base", P: []byte{2}},
	)
	for _, r := range rs {
		if r.Errno != 0 {
			t.Fatalf("dh operand: %+v", r)
		}
	}
	return rs[0].N, rs[1].N, rs[2].N
}

// One uid running many 16,384-bit dh_computes at once (seconds of CPU
// each) and another uid's reads: with the daemon's bounds (one expensive
// operation per uid, GOMAXPROCS-1 in all) the reads keep a processor;
// "unbounded" lifts them, as before. Compare p99 and max across the
// variants of one run:
//
//	go test -run xxx -bench ReadDuringDHFlood -benchtime 3000x ./integration/hardening
func BenchmarkReadDuringDHFlood(b *testing.B) {
	needRoot(b)
	for _, v := range []struct {
		name   string
		flood  int
		limits server.Limits
	}{
		{"idle", 0, server.Limits{}},
		{"flood", 8, server.Limits{}},
		{"flood-unbounded", 8, server.Limits{MaxExpensive: 1000, MaxExpensivePerUID: 1000}},
	} {
		b.Run(v.name, func(b *testing.B) {
			d := startDaemon(b, daemonConfig{limits: v.limits})
			reader := d.dial(b)
			key, err := reader.AddKey("user", "probe", []byte("payload"), keys.UserKeyring)
			if err != nil {
				b.Fatal(err)
			}
			var agents []*agent
			for range v.flood {
				a := startAgent(b, d, asOwner)
				priv, prime, base := dhOperands(b, a, 2048) // 16,384 bits
				a.send(call{Op: "loop", Seq: []call{{Op: "dh", A: priv, B: prime, C: base}}})
				agents = append(agents, a)
			}
			defer func() {
				for _, a := range agents {
					a.kill()
				}
			}()
			if v.flood > 0 {
				time.Sleep(500 * time.Millisecond) // the computations are under way
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := reader.Read(key); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
		})
	}
}

// A uid that asks for several dh_computes at once runs them one after
// another: the daemon never runs more than one of its expensive
// operations at a time, and another uid is served meanwhile.
func TestDHComputeOneAtATimePerUID(t *testing.T) {
	needRoot(t)
	d := startDaemon(t, daemonConfig{limits: server.Limits{MaxExpensive: 4, MaxExpensivePerUID: 1}})
	const n = 2
	var agents []*agent
	var ops [n][3]int64
	for i := range n {
		a := startAgent(t, d, asOwner)
		priv, prime, base := dhOperands(t, a, 2048) // 16,384 bits: a second of CPU or more, so that runs overlap unless bounded
		ops[i] = [3]int64{priv, prime, base}
		agents = append(agents, a)
	}
	victim := startAgent(t, d, asOther)
	for i, a := range agents {
		a.send(call{Op: "dh", A: ops[i][0], B: ops[i][1], C: ops[i][2]})
	}
	peak, samples := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, a := range agents {
			if r := a.recv(1)[0]; r.Errno != 0 || len(r.Out) != 2048 {
				t.Errorf("dh_compute: errno %d, %d bytes", r.Errno, len(r.Out))
			}
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(5 * time.Millisecond):
			v, _ := strconv.Atoi(d.status(t, "expensive_running"))
			peak = max(peak, v)
			samples++
			if r := victim.one(call{Op: "getid", A: int64(keys.UserKeyring)}); r.Errno != 0 {
				t.Fatalf("another uid during the dh_computes: %+v", r)
			}
		}
	}
	if peak != 1 {
		t.Fatalf("%d of one uid's dh_computes ran at once (bound 1; %d samples)", peak, samples)
	}
}
