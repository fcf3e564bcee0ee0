package secmem_test

import (
	"bytes"
	"fmt"

	"github.com/ukeys/ukeys/internal/secmem"
)

// A payload is kept in the arena: copied in without passing through the
// vector registers, and wiped when freed.
func Example() {
	payload := []byte("a key's payload")
	kept := secmem.Alloc(len(payload))
	secmem.Copy(kept, payload)
	fmt.Println(len(kept), bytes.Equal(kept, payload))
	secmem.Free(kept) // wipes it; nothing may use kept after
	// Output: 15 true
}
