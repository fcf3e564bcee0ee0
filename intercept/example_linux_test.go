package intercept_test

import (
	"fmt"

	"github.com/ukeys/ukeys/intercept"
)

// The filter a program runs under: the three key calls go to the
// listener; everything else runs as it would.
func ExampleFilter() {
	prog := intercept.Filter()
	fmt.Println(len(prog) > 0 && len(prog) < 64)
	// Output: true
}
