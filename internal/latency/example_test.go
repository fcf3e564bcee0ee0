package latency_test

import (
	"fmt"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/latency"
)

// A package records durations in nanoseconds and reports their summary.
func ExampleOf() {
	h := hdrhistogram.New(1, int64(time.Hour), 2)
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond, 40 * time.Millisecond} {
		_ = h.RecordValue(int64(d))
	}
	s := latency.Of(h)
	fmt.Println(s.Count, s.Min.Round(time.Millisecond), s.P50.Round(time.Millisecond), s.Max.Round(time.Millisecond))
	// Output: 4 1ms 2ms 40ms
}
