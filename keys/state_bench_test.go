package keys

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"testing"
)

// stateBenchService makes a service of many keys, as ukeybench's
// handover scenario holds them (user keys of 16 bytes, spread round-robin
// over 100 keyrings in the user keyring): UKEYS_BENCH_STATE_KEYS keys
// (default 200,000). It is closed when the benchmark ends.
func stateBenchService(b *testing.B) *Service {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("UKEYS_BENCH_STATE_KEYS")); err == nil {
		n = v
	}
	tun := DefaultTunables()
	tun.RootMaxKeys, tun.RootMaxBytes = n+1000, 64*(n+1000)
	s := New(WithTunables(tun))
	b.Cleanup(func() { s.Close() })
	c := s.NewCaller(Cred{UID: 0, GID: 0, PID: 1})
	defer c.Release()
	var rings []Serial
	for i := range 100 {
		r, err := c.AddKey("keyring", fmt.Sprintf("ring%d", i), nil, UserKeyring)
		if err != nil {
			b.Fatal(err)
		}
		rings = append(rings, r)
	}
	payload := []byte("0123456789abcdef")
	for i := range n {
		if _, err := c.AddKey("user", fmt.Sprintf("k%d", i), payload, rings[i%len(rings)]); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkStateExport writes the state of many keys (Export), as the
// daemon handing over does: Go's collector off.
func BenchmarkStateExport(b *testing.B) {
	s := stateBenchService(b)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for b.Loop() {
		if err := s.Export(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStateImport reads it back (Import), as the daemon taking over
// does: Go's collector off while it reads.
func BenchmarkStateImport(b *testing.B) {
	var buf bytes.Buffer
	if err := stateBenchService(b).Export(&buf); err != nil {
		b.Fatal(err)
	}
	stream := buf.Bytes()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		old := debug.SetGCPercent(-1)
		rs, err := Import(bytes.NewReader(stream))
		debug.SetGCPercent(old)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		rs.Done()
		rs.Service().Close()
		b.StartTimer()
	}
}
