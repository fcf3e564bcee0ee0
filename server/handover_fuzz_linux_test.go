package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/sock"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// chunked frames b as chunkWriter does, in chunks of at most size bytes
// (size 0: chunkMax), ended by the empty chunk.
func chunked(b []byte, size int) []byte {
	if size <= 0 || size > chunkMax {
		size = chunkMax
	}
	var out []byte
	for len(b) > 0 {
		k := min(len(b), size)
		out = binary.BigEndian.AppendUint32(out, uint32(k))
		out, b = append(out, b[:k]...), b[k:]
	}
	return binary.BigEndian.AppendUint32(out, 0)
}

// dribble is a reader that hands out at most n bytes a call (1 when n is
// 0), as a socket may.
type dribble struct {
	r io.Reader
	n int
}

func (d *dribble) Read(p []byte) (int, error) {
	return d.r.Read(p[:min(len(p), max(d.n, 1))])
}

// Whatever bytes arrive, a chunkReader never panics, never returns more
// than its bound or more than one stream, and returns exactly what a
// plain reading of the chunks' framing says the stream holds, ending
// with io.EOF only at the empty chunk; and what chunkWriter writes, in
// any sizes of writes, it reads back whole.
func FuzzChunkReader(f *testing.F) {
	f.Add(chunked([]byte("hello, world"), 5), uint32(64), uint8(3))
	f.Add(chunked(nil, 0), uint32(0), uint8(0))
	f.Add(append(chunked([]byte("abc"), 0), chunked([]byte("next stream"), 0)...), uint32(2), uint8(1))
	f.Add([]byte{0, 0, 0, 5, 'a', 'b'}, uint32(100), uint8(7))          // cut short
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'x'}, uint32(1<<30), uint8(9)) // over chunkMax
	f.Add([]byte{0, 4, 0, 1, 'x'}, uint32(1<<30), uint8(2))             // just over chunkMax
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 3, 'd'}, uint32(4), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, bound uint32, step uint8) {
		limit := int(bound % (1 << 20))
		// What the framing says: the chunks' bodies up to the empty
		// chunk, or an error where a chunk is cut short, over chunkMax or
		// over what is left of the bound.
		var want []byte
		wantErr := true
		for rest, left := b, limit; ; {
			if len(rest) < 4 {
				break
			}
			n := int(binary.BigEndian.Uint32(rest))
			rest = rest[4:]
			if n == 0 {
				wantErr = false
				break
			}
			if n > chunkMax || n > left {
				break
			}
			k := min(n, len(rest))
			want, rest, left = append(want, rest[:k]...), rest[k:], left-n
			if k < n {
				break
			}
		}
		src := bytes.NewReader(b)
		cr := &chunkReader{r: &dribble{r: src, n: int(step)}, max: limit}
		got, err := io.ReadAll(cr)
		if len(got) > limit {
			t.Fatalf("read %d bytes past a bound of %d", len(got), limit)
		}
		if wantErr != (err != nil) {
			t.Fatalf("error %v, want one: %v", err, wantErr)
		}
		if !bytes.HasPrefix(want, got) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("read %q, the framing holds %q", got, want)
		}
		if err == nil {
			// Ended at the empty chunk: what follows is left unread, and
			// reading on says EOF again.
			if used := len(b) - src.Len(); used != framedLen(b) {
				t.Fatalf("read %d bytes of the input, the stream is %d", used, framedLen(b))
			}
			if n, err := cr.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("after the end: %d, %v", n, err)
			}
		}

		// The round trip, in writes of step bytes.
		var out bytes.Buffer
		cw := newChunkWriter(&out)
		for rest := b; len(rest) > 0; {
			k := min(len(rest), max(int(step), 1)*97)
			if _, err := cw.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := cw.Close(); err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(&chunkReader{r: &dribble{r: &out, n: int(step) * 13}, max: len(b)})
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("round trip: %d bytes of %d back, %v", len(back), len(b), err)
		}
	})
}

// framedLen is the length of the stream that starts b, to its empty chunk
// included (b must hold one whole).
func framedLen(b []byte) int {
	n := 0
	for {
		k := int(binary.BigEndian.Uint32(b[n:]))
		n += 4 + k
		if k == 0 {
			return n
		}
	}
}

// fuzzState is a small service's exported keys, and records for it: a
// process (this one, so that the daemon can follow it), a session, a
// login, connections with unread bytes and a seccomp listener.
func fuzzState(f *testing.F) (keysStream, records []byte, unread []byte) {
	svc := keys.New()
	defer svc.Close()
	c := svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, CapsKnown: true})
	defer c.Release()
	ses, err := c.JoinSessionKeyring(nil)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := c.AddKey("user", "u", []byte("payload"), keys.SessionKeyring); err != nil {
		f.Fatal(err)
	}
	if _, err := c.AddKey("logon", "l:x", []byte("secret"), keys.SessionKeyring); err != nil {
		f.Fatal(err)
	}
	var ks bytes.Buffer
	cw := newChunkWriter(&ks)
	if err := svc.Export(cw); err != nil {
		f.Fatal(err)
	}
	if err := cw.Close(); err != nil {
		f.Fatal(err)
	}
	pid := os.Getpid()
	st := c.State()
	// The first connection's unread bytes: two requests (describe and
	// read the session keyring), the second's a frame cut short.
	var fr sock.Frames
	for i, op := range []wire.Op{wire.OpDescribe, wire.OpRead} {
		var req wire.Request
		if err := req.Set(op, wire.Int(int64(keys.SessionKeyring))); err != nil {
			f.Fatal(err)
		}
		req.Tag = uint32(i + 1)
		if err := fr.Request(&req); err != nil {
			f.Fatal(err)
		}
	}
	first := len(fr.Bytes())
	unread = append(append([]byte(nil), fr.Bytes()...), 0, 0, 0, 9, 'x')
	rec := handoverRecords{
		Version: HandoverVersion,
		Procs: []procRecord{{PID: pid, Start: process.StartTime(pid), Settled: true, Caller: st,
			Threads: map[int]keys.CallerState{pid + 1: st}}},
		Sessions: []sessionRecord{{Token: "token", Serial: ses, UID: 1000}},
		Logins:   []loginRecord{{UID: 1000, ID: 7, Serial: ses, AnchorPID: pid, AnchorStart: process.StartTime(pid)}},
		Conns: []connRecord{
			{FD: 0, PID: pid, Version: 3, UnreadLen: first},
			{FD: 1, Private: &procRecord{Caller: st}, Version: 2, UnreadLen: 5},
		},
		Seccomp: []seccompRecord{{FD: 2, UID: 1000}},
	}
	records, err = json.Marshal(rec)
	if err != nil {
		f.Fatal(err)
	}
	return ks.Bytes(), records, unread
}

// Whatever records and unread bytes follow the keys of a hand-over (or
// of what systemd kept), Thaw never panics, and either refuses with
// nothing left of the keys read, or makes a server whose keys keep their
// invariants and that shuts down, having served no more connections
// than came with descriptors.
func FuzzHandoverRecords(f *testing.F) {
	keysStream, records, unread := fuzzState(f)
	f.Add(records, unread)
	f.Add(records, []byte{})
	f.Add([]byte(`{"version":1}`), []byte{})
	f.Add([]byte(`{"version":1,"conns":[{"fd":0,"unread_len":-1}]}`), []byte{})
	f.Add([]byte(`{"version":1,"conns":[{"fd":0,"unread_len":3},{"fd":0,"unread_len":2}]}`), []byte("abcde"))
	f.Add([]byte(`{"version":1,"procs":[{"pid":1,"start":""},{"pid":1,"start":""}]}`), []byte{})
	f.Add([]byte(`{"version":1,"procs":[{"pid":4294967297,"start":""}]}`), []byte{})
	f.Add([]byte(`{"version":1,"sessions":[{"token":"t","serial":3}],"logins":[{"uid":0,"id":1,"serial":-3}]}`), []byte{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, records, unread []byte) {
		stream := append(append(append([]byte(nil), keysStream...), chunked(records, 7)...), chunked(unread, 5)...)
		// Two connections' descriptors come with the records, whose peers
		// (this process) have hung up: a connection restored serves the
		// requests among its unread bytes, and then ends.
		var fds []int
		for range 2 {
			pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(pair[1])
			fds = append(fds, pair[0])
		}
		res, err := Thaw(bytes.NewReader(stream), fds, nil, Config{Logger: quiet, ProcessPoll: 10 * time.Millisecond})
		if err != nil {
			return
		}
		defer res.Service.Close()
		if res.Conns > len(fds) || res.Listeners != nil {
			t.Errorf("served %d connections and %d listeners with %d descriptors", res.Conns, len(res.Listeners), len(fds))
		}
		// A process is kept only by a pid the kernel can name (a pid_t):
		// the pidfd of a pid past it would be of the pid it truncates to.
		res.Server.mu.Lock()
		for pid := range res.Server.procs.byPID {
			if pid <= 0 || pid > math.MaxInt32 {
				t.Errorf("a process kept by pid %d", pid)
			}
		}
		res.Server.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := res.Server.Shutdown(ctx); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("shutdown: %v", err)
		}
		if err := res.Service.WaitGC(ctx); err != nil {
			t.Fatal(err)
		}
		if err := res.Service.Check(); err != nil {
			t.Fatalf("accepted records left broken keys: %v", err)
		}
	})
}
