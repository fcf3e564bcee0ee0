package latency

import (
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

func TestOf(t *testing.T) {
	h := hdrhistogram.New(1, int64(time.Hour), 3)
	if s := Of(h); s != (Summary{}) {
		t.Fatalf("empty histogram: %+v", s)
	}
	for i := 1; i <= 1000; i++ {
		_ = h.RecordValue(int64(i) * int64(time.Microsecond))
	}
	s := Of(h)
	if s.Count != 1000 || s.Min != time.Microsecond || s.Max < 999*time.Microsecond ||
		s.P50 < 490*time.Microsecond || s.P50 > 510*time.Microsecond || !(s.P50 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max) {
		t.Fatalf("summary %+v", s)
	}
}
