package procs_test

import (
	"fmt"

	"github.com/ukeys/ukeys/internal/procs"
)

// On a machine of two processors the daemon runs three Go processors; in
// a container whose quota is two of eight, two.
func ExampleSpare() {
	fmt.Println(procs.Spare(2, 2))
	fmt.Println(procs.Spare(2, 8))
	// Output:
	// 3
	// 2
}
