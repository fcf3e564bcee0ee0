package keys

import (
	"slices"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/latency"
)

// gcHistFew is how many samples a [gcHist] keeps as they are before it
// makes its histogram.
const gcHistFew = 64

// gcHist is one of the collector's distributions (GCStats). Its first
// samples are kept as they are, and its HdrHistogram, some 300 KiB, is
// made only once there are more: a service whose collector has run a
// few items (a container that added a key and dropped it, of which the
// seccomp agent holds hundreds) holds a few hundred bytes of them.
type gcHist struct {
	highest time.Duration // the histogram's highest value
	few     []int64
	h       *hdrhistogram.Histogram
}

// record adds v, in nanoseconds, to the distribution.
func (g *gcHist) record(v int64) {
	if g.h == nil {
		if len(g.few) < gcHistFew {
			g.few = append(g.few, v)
			return
		}
		g.h = hdrhistogram.New(1, int64(g.highest), 3)
		for _, x := range g.few {
			_ = g.h.RecordValue(x)
		}
		g.few = nil
	}
	_ = g.h.RecordValue(v)
}

// summary summarises the distribution: from the samples themselves
// while there are few (each percentile the sample of the rank the
// histogram would take, which it gives within its precision).
func (g *gcHist) summary() latency.Summary {
	if g.h != nil {
		return latency.Of(g.h)
	}
	if len(g.few) == 0 {
		return latency.Summary{}
	}
	s := slices.Sorted(slices.Values(g.few))
	var sum int64
	for _, v := range s {
		sum += v
	}
	at := func(p float64) time.Duration {
		rank := int(p/100*float64(len(s)) + 0.5) // HdrHistogram's
		return time.Duration(s[min(max(rank, 1), len(s))-1])
	}
	return latency.Summary{Count: int64(len(s)), Min: time.Duration(s[0]), Mean: time.Duration(sum / int64(len(s))),
		P50: at(50), P99: at(99), P999: at(99.9), Max: time.Duration(s[len(s)-1])}
}
