package bigkey

import (
	"testing"

	"github.com/ukeys/ukeys/keys"
)

// BenchmarkBigKeyAdd adds a 1 MiB big_key: sealed (encrypted with a key
// of its own) and written to an unlinked file, as the kernel's big_key
// writes to shmem.
func BenchmarkBigKeyAdd(b *testing.B) {
	s := keys.New()
	defer s.Close()
	c := s.NewCaller(keys.Cred{UID: 0, PID: 1})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, keys.MaxPayload) // add_key's bound, a byte under big_key's
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := c.AddKey("big_key", "bk", payload, keys.SessionKeyring); err != nil {
			b.Fatal(err)
		}
	}
}
