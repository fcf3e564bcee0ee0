package keys

import "testing"

// BenchmarkBigKeyAdd adds a 1 MiB big_key: sealed (encrypted with a key
// of its own) and written to an unlinked file, as the kernel's big_key
// writes to shmem.
func BenchmarkBigKeyAdd(b *testing.B) {
	s := New()
	defer s.Close()
	c := s.NewCaller(Cred{UID: 0, PID: 1})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, MaxPayload) // add_key's bound, a byte under big_key's
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := c.AddKey("big_key", "bk", payload, SessionKeyring); err != nil {
			b.Fatal(err)
		}
	}
}
