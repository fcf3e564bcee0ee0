package latency

import (
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Summary summarises a distribution of durations.
type Summary struct {
	Count int64
	Min   time.Duration
	Mean  time.Duration
	P50   time.Duration
	P99   time.Duration
	P999  time.Duration
	Max   time.Duration
}

// Of summarises h, whose values are nanoseconds. An empty histogram gives
// the zero [Summary].
func Of(h *hdrhistogram.Histogram) Summary {
	if h.TotalCount() == 0 {
		return Summary{}
	}
	// Each accessor walks the whole histogram; the percentiles share one
	// walk.
	q := h.ValueAtPercentiles([]float64{50, 99, 99.9})
	return Summary{
		Count: h.TotalCount(),
		Min:   time.Duration(h.Min()),
		Mean:  time.Duration(h.Mean()),
		P50:   time.Duration(q[50]),
		P99:   time.Duration(q[99]),
		P999:  time.Duration(q[99.9]),
		Max:   time.Duration(h.Max()),
	}
}
