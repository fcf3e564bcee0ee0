package goroutine_test

import (
	"fmt"

	"github.com/ukeys/ukeys/internal/goroutine"
)

// A goroutine learns its own identifier, as a stall report names the
// goroutine that holds a grace period back.
func ExampleID() {
	here := goroutine.ID()
	there := make(chan int64)
	go func() { there <- goroutine.ID() }()
	other := <-there
	fmt.Println(here > 0, other > 0, here != other)
	// Output: true true true
}
