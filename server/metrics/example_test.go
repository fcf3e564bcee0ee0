package metrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/server/metrics"
	"github.com/ukeys/ukeys/wire"
)

func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	// ukeyd passes m as server.Config.Metrics; the server then reports
	// every operation it serves.
	var obs server.Observer = m
	obs.Observe(wire.OpRead, 0, 3*time.Microsecond)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "ukeyd_operations_total" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	// Output: ukeyd_operations_total 1
}
