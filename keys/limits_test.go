package keys

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes the heap handed out while f ran n times.
func allocated(n int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Oversized descriptions, payloads, names and callout strings are refused
// with EINVAL before anything of their size is allocated: a hostile
// caller cannot make the service copy what it will refuse anyway.
func TestHugeArgumentsRefusedBeforeAllocation(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 100)
	ring := must(c.AddKey("keyring", "r", nil, SessionKeyring))(t)
	const size = 2 << 20
	huge := strings.Repeat("d", size)
	hugeB := []byte(huge)
	userMax := make([]byte, MaxUserPayload+1)
	cases := []struct {
		name string
		big  int // bytes the refused argument holds
		op   func() error
	}{
		{"add_key description", size, func() error { _, err := c.AddKey("user", huge, []byte("x"), ring); return err }},
		{"add_key payload", size, func() error { _, err := c.AddKey("user", "d", hugeB, ring); return err }},
		{"add_key user payload over 32767", len(userMax), func() error { _, err := c.AddKey("user", "d", userMax, ring); return err }},
		{"add_key big_key payload over 1 MiB", size, func() error { _, err := c.AddKey("big_key", "d", hugeB[:MaxBigKeyPayload+1], ring); return err }},
		{"update payload", size, func() error { return c.Update(ring, hugeB) }},
		{"request_key description", size, func() error { _, err := c.RequestKey("user", huge, nil, 0); return err }},
		{"request_key callout", size, func() error { _, err := c.RequestKey("user", "d", hugeB, 0); return err }},
		{"join_session_keyring name", size, func() error { _, err := c.JoinSessionKeyring(&huge); return err }},
		{"instantiate payload", size, func() error { return c.Instantiate(ring, hugeB, 0) }},
		{"restrict_keyring spec", size, func() error { typ := "asymmetric"; return c.RestrictKeyring(ring, &typ, &huge) }},
	}
	keys0, bytes0 := e.s.QuotaUsage(1000)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, EINVAL) {
				t.Fatalf("got %v, want EINVAL", err)
			}
			const n = 20
			got := allocated(n, func() { tc.op() })
			// Far less than one copy of the argument per call: the limit
			// is checked first. (Small allocations of errors and lookups
			// remain, and other goroutines may allocate meanwhile.)
			if got >= uint64(n*tc.big/4) {
				t.Fatalf("%d refused calls allocated %d bytes for %d-byte arguments", n, got, tc.big)
			}
		})
	}
	if err := e.s.Check(); err != nil {
		t.Fatal(err)
	}
	if k, b := e.s.QuotaUsage(1000); k != keys0 || b != bytes0 {
		t.Fatalf("refused calls changed the quota: %d keys, %d bytes", k, b)
	}
}
