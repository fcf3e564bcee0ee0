package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// Metrics are ukeyd's Prometheus collectors; they implement
// server.Observer. A nil *Metrics records nothing. No label or value ever carries a description or payload.
type Metrics struct {
	ops     *prometheus.CounterVec
	latency *prometheus.HistogramVec
	conns   prometheus.Gauge
	refuse  prometheus.Counter

	// children caches the labelled collectors by operation and errno:
	// looking them up in the vectors hashes label strings under a lock on
	// every request, which costs more than serving a key read.
	children sync.Map // uint32(op)<<16 | errno → *opMetrics
}

// unknownOp stands for every operation number the protocol does not
// define.
const unknownOp wire.Op = 0xFFFF

type opMetrics struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ukeyd", Name: "operations_total",
			Help: "Operations served, by operation and errno (0 for success).",
		}, []string{"op", "errno"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ukeyd", Name: "operation_seconds",
			Help:    "Time to serve an operation, from decoded request to response.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}, []string{"op"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ukeyd", Name: "connections",
			Help: "Open client connections.",
		}),
		refuse: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ukeyd", Name: "connections_refused_total",
			Help: "Connections refused because their uid had too many open.",
		}),
	}
	reg.MustRegister(m.ops, m.latency, m.conns, m.refuse)
	return m
}

// Observe counts one operation and records how long it took.
func (m *Metrics) Observe(op wire.Op, errno uint16, d time.Duration) {
	if m == nil {
		return
	}
	v, ok := m.children.Load(uint32(op)<<16 | uint32(errno))
	if !ok {
		if !op.Known() {
			op = unknownOp // one entry for all of them: clients choose op numbers
		}
		v, _ = m.children.LoadOrStore(uint32(op)<<16|uint32(errno), &opMetrics{
			count:   m.ops.WithLabelValues(op.String(), strconv.Itoa(int(errno))),
			latency: m.latency.WithLabelValues(op.String()),
		})
	}
	om := v.(*opMetrics)
	om.count.Inc()
	om.latency.Observe(d.Seconds())
}

func (m *Metrics) ConnOpened() {
	if m != nil {
		m.conns.Inc()
	}
}

func (m *Metrics) ConnClosed() {
	if m != nil {
		m.conns.Dec()
	}
}

func (m *Metrics) Refused() {
	if m != nil {
		m.refuse.Inc()
	}
}

// RegisterService adds gauges read from svc at scrape time: keys, quota
// use per uid, and the rcu domain's statistics.
func (m *Metrics) RegisterService(reg prometheus.Registerer, svc *keys.Service) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ukeyd", Name: "keys", Help: "Keys in the serial index."},
			func() float64 { return float64(svc.Keys()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ukeyd", Subsystem: "rcu", Name: "grace_periods_total", Help: "Grace periods completed."},
			func() float64 { return float64(svc.Domain().Stats().GracePeriods) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ukeyd", Subsystem: "rcu", Name: "callback_backlog", Help: "Callbacks queued and not yet run."},
			func() float64 { return float64(svc.Domain().Stats().CallbackBacklog) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ukeyd", Subsystem: "rcu", Name: "stalls_total", Help: "Stall reports issued."},
			func() float64 { return float64(svc.Domain().Stats().Stalls) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ukeyd", Subsystem: "rcu", Name: "grace_period_p99_seconds", Help: "99th percentile of grace-period latency."},
			func() float64 { return svc.Domain().Stats().GracePeriodLatency.P99.Seconds() }),
	)
}
