package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/ukeys/ukeys/internal/ratelimit"
)

// Five refusals a second are logged; the sixth and seventh are counted,
// and the first line of the next second says so.
func Example() {
	lim := &ratelimit.Limiter{Interval: time.Second, Burst: 5}
	t0 := time.Unix(0, 0)
	for i := range 7 {
		if ok, _ := lim.Allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok {
			fmt.Println("refusal", i, "suppressed")
		}
	}
	ok, suppressed := lim.Allow(t0.Add(time.Second))
	fmt.Println(ok, suppressed)
	// Output:
	// refusal 5 suppressed
	// refusal 6 suppressed
	// true 2
}
