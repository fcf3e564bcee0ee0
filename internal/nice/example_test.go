package nice_test

import (
	"fmt"

	"github.com/ukeys/ukeys/internal/nice"
)

// Run returns once f has run, at a low priority where the system allows.
func ExampleRun() {
	nice.Run(func() { fmt.Println("verified") })
	// Output: verified
}
