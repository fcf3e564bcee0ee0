package keys

import (
	"strconv"
	"testing"
)

// BenchmarkUnlink unlinks keys one keyctl_unlink at a time from a
// keyring that holds 100,000 user keys (ukeybench gc's mixed case
// unlinks half a million from a million). The keys are added outside
// the timer, in rounds of 100,000.
func BenchmarkUnlink(b *testing.B) {
	tun := DefaultTunables()
	tun.RootMaxKeys, tun.RootMaxBytes = 1<<31-1, 1<<31-1
	s := benchEnv(b, tun)
	c := benchCaller(b, s, 0)
	ring := must(c.AddKey("keyring", "dest", nil, SessionKeyring))(b)
	payload := []byte("0123456789abcdef")
	const n = 100_000
	var ids []Serial
	fill := func() {
		b.StopTimer()
		ids = ids[:0]
		for i := range n {
			id, err := c.AddKey("user", "g"+strconv.Itoa(i), payload, ring)
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		b.StartTimer()
	}
	b.ReportAllocs()
	i := n
	for b.Loop() {
		if i == n {
			fill()
			i = 0
		}
		if err := c.Unlink(ids[i], ring); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
