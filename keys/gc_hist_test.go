package keys

import (
	"math/rand/v2"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/latency"
)

// A gcHist summarises as the histogram it stands for would, within the
// histogram's precision (0.1%), with few samples and once it has made
// its histogram; it makes none for few.
func TestGCHistSummariesAsAHistogram(t *testing.T) {
	near := func(a, b time.Duration) bool { return a == b || (a-b).Abs() <= max(a, b)/500 }
	for _, n := range []int{0, 1, 2, 7, gcHistFew, gcHistFew + 1, 1000} {
		g := gcHist{highest: time.Hour}
		h := hdrhistogram.New(1, int64(time.Hour), 3)
		r := rand.New(rand.NewPCG(uint64(n), 1))
		for range n {
			v := 1 + r.Int64N(int64(10*time.Millisecond))
			g.record(v)
			_ = h.RecordValue(v)
		}
		if (g.h != nil) != (n > gcHistFew) {
			t.Errorf("%d samples: histogram made %v", n, g.h != nil)
		}
		got, want := g.summary(), latency.Of(h)
		if got.Count != want.Count || !near(got.Min, want.Min) || !near(got.Mean, want.Mean) || !near(got.P50, want.P50) ||
			!near(got.P99, want.P99) || !near(got.P999, want.P999) || !near(got.Max, want.Max) {
			t.Errorf("%d samples: summary %+v, the histogram's %+v", n, got, want)
		}
	}
}
