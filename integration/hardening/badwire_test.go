package hardening

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

func frame(body []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(len(body))) // header only; body appended by callers
}

func withFrame(body []byte) []byte { return append(frame(body), body...) }

func reqBody(t testing.TB, tag uint32, op wire.Op, ints []int64, bufs ...[]byte) []byte {
	t.Helper()
	b, err := wire.AppendRequest(nil, &wire.Request{Tag: tag, Op: op, Ints: ints, Bufs: bufs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var hello = withFrame(wire.EncodeHello(wire.Version))

// Truncated, oversized, out-of-order and unknown-version messages over a
// real socket: the daemon answers with an error or closes that connection,
// and nothing else changes: other clients are served throughout, keys are
// as they were, and the connections' goroutines end.
func TestMalformedMessagesOverSocket(t *testing.T) {
	// Room for the random connections below, which the daemon may not
	// have closed yet when the next arrives (the per-uid bound is
	// server's own test).
	d := startDaemon(t, daemonConfig{readTimeout: 300 * time.Millisecond, maxConns: 1024})
	// Connections idle past the short read timeout are closed, so the
	// good client dials afresh for each check; its key lives in the user
	// keyring, which outlives its connections.
	withGood := func(f func(c *client.Client)) {
		c, err := client.Dial(d.path)
		if err != nil {
			t.Fatalf("a good client cannot connect: %v", err)
		}
		defer c.Close()
		f(c)
	}
	var id keys.Serial
	var before string
	withGood(func(c *client.Client) {
		var err error
		if id, err = c.AddKey("user", "kept", []byte("unchanged"), keys.UserKeyring); err != nil {
			t.Fatal(err)
		}
		before, _ = c.ProcKeys()
	})
	statusConns := func() (line string) {
		withGood(func(c *client.Client) {
			st, err := c.Status()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(st, "\n") {
				if strings.HasPrefix(l, "connections:") {
					line = l
				}
			}
		})
		return line
	}
	idle := statusConns()

	read := reqBody(t, 1, wire.OpRead, []int64{int64(id)})
	closed := []struct {
		name string
		send []byte
	}{
		{"nothing at all", nil},
		{"half a hello header", []byte{0, 0}},
		{"a hello cut short", hello[:7]},
		{"a hello of the wrong magic", withFrame([]byte("NOPE\x00\x01"))},
		{"a hello of version 0", withFrame(wire.EncodeHello(0))},
		{"a hello too long", withFrame(append(wire.EncodeHello(1), 0))},
		{"a request before any hello", withFrame(read)},
		{"an oversized hello", []byte{0x00, 0x20, 0x00, 0x00}},
		{"a second hello", append(append([]byte(nil), hello...), hello...)},
		{"a frame header cut short", append(append([]byte(nil), hello...), 0, 0, 1)},
		{"a frame cut short", append(append(append([]byte(nil), hello...), frame(read)...), read[:5]...)},
		{"a frame past MaxFrame", append(append([]byte(nil), hello...), 0x00, 0x20, 0x00, 0x00)},
		{"a 4 GiB frame header", append(append([]byte(nil), hello...), 0xff, 0xff, 0xff, 0xff)},
		{"a body too short for a header", append(append([]byte(nil), hello...), withFrame([]byte{0, 0, 0, 1, 0, 11})...)},
		{"too many integers", append(append([]byte(nil), hello...), withFrame([]byte{0, 0, 0, 1, 0, 11, 200, 0})...)},
		{"a buffer overrunning its frame", append(append([]byte(nil), hello...), withFrame([]byte{0, 0, 0, 1, 0, 11, 0, 1, 0, 0, 1, 0, 'x'})...)},
		{"trailing bytes", append(append([]byte(nil), hello...), withFrame(append(append([]byte(nil), read...), 0))...)},
	}
	for _, tc := range closed {
		t.Run("closes/"+tc.name, func(t *testing.T) {
			conn, err := net.Dial("unix", d.path)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(tc.send)
			// Whatever it answers first (a hello), the daemon must then
			// close the connection, at once or at the read deadline, and
			// never answer the malformed request.
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			rest, err := io.ReadAll(conn)
			if err != nil {
				t.Fatalf("the connection stayed open: %v", err)
			}
			if len(rest) > 0 && !bytes.Equal(rest, withFrame(wire.EncodeHello(wire.Version))) {
				t.Fatalf("the daemon answered %x", rest)
			}
		})
	}

	t.Run("answers", func(t *testing.T) {
		conn, err := net.Dial("unix", d.path)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A newer client's hello: the daemon answers with the version it
		// speaks.
		conn.Write(withFrame(wire.EncodeHello(999)))
		hb, err := wire.ReadFrame(conn, nil)
		if v, herr := wire.DecodeHello(hb); err != nil || herr != nil || v != wire.Version {
			t.Fatalf("hello for version 999: %x %v %v", hb, err, herr)
		}
		// Pipelined requests, a reused tag, an unknown operation, missing
		// and extra arguments: each answered in order, the connection kept.
		reqs := [][]byte{
			reqBody(t, 7, wire.OpRead, []int64{int64(id)}),
			reqBody(t, 7, wire.Op(9999), nil),
			reqBody(t, 8, wire.OpRead, nil),
			reqBody(t, 9, wire.OpAddKey, nil),
			reqBody(t, 10, wire.OpSearch, []int64{int64(keys.UserKeyring)}, []byte("user")),
			reqBody(t, 11, wire.OpRead, []int64{int64(id), 1, 2, 3, 4, 5, 6, 7}, []byte("x"), nil, []byte("y")),
		}
		var all []byte
		for _, r := range reqs {
			all = append(all, withFrame(r)...)
		}
		conn.Write(all)
		wantTags := []uint32{7, 7, 8, 9, 10, 11}
		var errnos []uint16
		for i := range reqs {
			rb, err := wire.ReadFrame(conn, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			resp, err := wire.DecodeResponse(rb)
			if err != nil || resp.Tag != wantTags[i] {
				t.Fatalf("answer %d: %+v %v", i, resp, err)
			}
			errnos = append(errnos, resp.Errno)
		}
		// The unknown operation, the missing arguments: errors; the rest
		// as the arguments given mean.
		if errnos[0] != 0 || errnos[1] != uint16(keys.EOPNOTSUPP) || errnos[2] == 0 || errnos[3] == 0 || errnos[4] == 0 || errnos[5] != 0 {
			t.Fatalf("errnos %v", errnos)
		}
	})

	t.Run("random bytes", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 200; i++ {
			conn, err := net.Dial("unix", d.path)
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, rng.IntN(64))
			for j := range junk {
				junk[j] = byte(rng.Uint32())
			}
			if i%2 == 0 {
				junk = append(append([]byte(nil), hello...), junk...)
			}
			conn.Write(junk)
			conn.Close()
		}
	})

	// Nothing else changed.
	withGood(func(c *client.Client) {
		if b, err := c.Read(id); err != nil || string(b) != "unchanged" {
			t.Fatalf("the good client after the abuse: %q, %v", b, err)
		}
		if after, _ := c.ProcKeys(); after != before {
			t.Fatalf("keys changed:\n%s\nvs\n%s", before, after)
		}
	})
	testutil.Eventually(t, "the bad connections to end", func() bool { return statusConns() == idle })
	d.settle(t)
}
