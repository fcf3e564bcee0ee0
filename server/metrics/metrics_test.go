package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/wire"
)

// counts gathers reg and returns operations_total by "op/errno".
func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ukeyd_operations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var op, errno string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					op = l.GetValue()
				case "errno":
					errno = l.GetValue()
				}
			}
			out[op+"/"+errno] += m.GetCounter().GetValue()
		}
	}
	return out
}

func TestObserve(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	for range 3 {
		m.Observe(wire.OpRead, 0, time.Microsecond)
	}
	m.Observe(wire.OpRead, 126, time.Microsecond)
	// Operation numbers a client made up share one series.
	m.Observe(wire.Op(4242), 95, time.Microsecond)
	m.Observe(wire.Op(4343), 95, time.Microsecond)
	got := counts(t, reg)
	want := map[string]float64{"read/0": 3, "read/126": 1, "unknown/95": 2}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	var nilM *Metrics
	nilM.Observe(wire.OpRead, 0, time.Microsecond) // records nothing, does not panic
}

func BenchmarkObserve(b *testing.B) {
	m := New(prometheus.NewRegistry())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(wire.OpRead, 0, time.Microsecond)
		}
	})
}
