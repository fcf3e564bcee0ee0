package bigkey_test

import (
	"fmt"
	"strings"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/keys/bigkey"
)

// A big_key above Inline bytes is kept in a file, one at or below it in
// memory: /proc/keys says which ("file" or "buff"), in the order of the
// keys' serials, which are random.
func Example() {
	s := keys.New() // has big_key: this program imports package bigkey
	defer s.Close()
	c := s.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 1})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		panic(err)
	}
	for _, n := range []int{bigkey.Inline, 2 * bigkey.Inline} {
		if _, err := c.AddKey("big_key", fmt.Sprint("k", n), make([]byte, n), keys.SessionKeyring); err != nil {
			panic(err)
		}
	}
	for _, line := range strings.Split(c.ProcKeys(), "\n") {
		if _, rest, ok := strings.Cut(line, "big_key"); ok {
			fmt.Println(strings.TrimSpace(rest))
		}
	}
	// Unordered output:
	// k1024: 1024 [buff]
	// k2048: 2048 [file]
}
