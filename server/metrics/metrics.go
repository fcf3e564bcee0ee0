package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// Metrics are ukeyd's Prometheus collectors; they implement
// [server.Observer]. A nil *Metrics records nothing. No label or value
// ever carries a description or payload.
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
// use per uid, the key collector's and the rcu domain's statistics.
func (m *Metrics) RegisterService(reg prometheus.Registerer, svc *keys.Service) {
	reg.MustRegister(serviceCollector{svc})
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

// RegisterServer adds gauges read from srv at scrape time: what callers
// hold of it (client processes, buffered bytes, expensive operations
// running) beside the bounds, and the big_key files open. Connections are
// counted by the [server.Observer] (ukeyd_connections).
func (m *Metrics) RegisterServer(reg prometheus.Registerer, srv *server.Server) {
	gauge := func(name, help string, f func(server.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ukeyd", Name: name, Help: help},
			func() float64 { return float64(f(srv.Stats())) })
	}
	reg.MustRegister(
		gauge("connections_max", "Bound on connections open (per uid: an eighth, at most 256, unless set).", func(s server.Stats) int { return s.Limits.MaxConns }),
		gauge("processes", "Client processes whose keyrings the daemon keeps.", func(s server.Stats) int { return s.Procs }),
		gauge("processes_max", "Bound on client processes kept.", func(s server.Stats) int { return s.Limits.MaxProcs }),
		gauge("buffered_bytes", "Bytes held for large requests and answers.", func(s server.Stats) int { return s.BufferedBytes }),
		gauge("buffered_bytes_max", "Bound on bytes held for large requests and answers.", func(s server.Stats) int { return s.Limits.MaxBuffered }),
		gauge("expensive_running", "Expensive operations (dh_compute) running.", func(s server.Stats) int { return s.ExpensiveRunning }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ukeyd", Name: "big_key_files", Help: "big_key payloads kept in files (one descriptor each)."},
			func() float64 { return float64(keys.BigKeyFiles()) }),
	)
}

// serviceCollector reads the quota records and the collector's counters
// at scrape time: one read of each per scrape, whatever the series.
type serviceCollector struct{ svc *keys.Service }

var (
	quotaKeysDesc     = prometheus.NewDesc("ukeyd_quota_keys", "Keys counted against the uid's quota (/proc/key-users).", []string{"uid"}, nil)
	quotaBytesDesc    = prometheus.NewDesc("ukeyd_quota_bytes", "Bytes counted against the uid's quota (/proc/key-users).", []string{"uid"}, nil)
	quotaMaxKeysDesc  = prometheus.NewDesc("ukeyd_quota_max_keys", "The uid's key quota.", []string{"uid"}, nil)
	quotaMaxBytesDesc = prometheus.NewDesc("ukeyd_quota_max_bytes", "The uid's byte quota.", []string{"uid"}, nil)
	gcPassesDesc      = prometheus.NewDesc("ukeyd_gc_passes_total", "Complete passes of the key collector over the serial index.", nil, nil)
	gcItemsDesc       = prometheus.NewDesc("ukeyd_gc_items_total", "Work items the key collector ran.", nil, nil)
	gcScannedDesc     = prometheus.NewDesc("ukeyd_gc_scanned_total", "Keys the key collector examined.", nil, nil)
	gcPrunedDesc      = prometheus.NewDesc("ukeyd_gc_pruned_links_total", "Links to dead keys the key collector removed, by reason.", []string{"reason"}, nil)
	gcDestroyedDesc   = prometheus.NewDesc("ukeyd_gc_destroyed_total", "Keys the key collector destroyed.", nil, nil)
	gcSweepsDesc      = prometheus.NewDesc("ukeyd_gc_keyring_sweeps_total", "Keyrings swept whole because many of their links died at once.", nil, nil)
	gcItemP99Desc     = prometheus.NewDesc("ukeyd_gc_work_item_p99_seconds", "99th percentile of the key collector's work-item run time.", nil, nil)
	gcItemMaxDesc     = prometheus.NewDesc("ukeyd_gc_work_item_max_seconds", "Longest key-collector work item.", nil, nil)
	gcDeathP99Desc    = prometheus.NewDesc("ukeyd_gc_death_to_destruction_p99_seconds", "99th percentile of the time from a key's last reference to its destruction.", nil, nil)
)

var pruneReasons = [...]struct {
	i    int
	name string
}{{keys.ReapExpired, "expired"}, {keys.ReapRevoked, "revoked"}, {keys.ReapInvalidated, "invalidated"}, {keys.ReapDead, "dead_type"}}

func (serviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{quotaKeysDesc, quotaBytesDesc, quotaMaxKeysDesc, quotaMaxBytesDesc,
		gcPassesDesc, gcItemsDesc, gcScannedDesc, gcPrunedDesc, gcDestroyedDesc, gcSweepsDesc,
		gcItemP99Desc, gcItemMaxDesc, gcDeathP99Desc} {
		ch <- d
	}
}

func (c serviceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.svc.QuotaUsers() {
		uid := strconv.FormatUint(uint64(u.UID), 10)
		ch <- prometheus.MustNewConstMetric(quotaKeysDesc, prometheus.GaugeValue, float64(u.QuotaKeys), uid)
		ch <- prometheus.MustNewConstMetric(quotaBytesDesc, prometheus.GaugeValue, float64(u.QuotaBytes), uid)
		ch <- prometheus.MustNewConstMetric(quotaMaxKeysDesc, prometheus.GaugeValue, float64(u.MaxKeys), uid)
		ch <- prometheus.MustNewConstMetric(quotaMaxBytesDesc, prometheus.GaugeValue, float64(u.MaxBytes), uid)
	}
	st := c.svc.GCStats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(gcPassesDesc, st.Passes)
	counter(gcItemsDesc, st.Items)
	counter(gcScannedDesc, st.Scanned)
	for _, r := range pruneReasons {
		counter(gcPrunedDesc, st.Pruned[r.i], r.name)
	}
	counter(gcDestroyedDesc, st.Destroyed)
	counter(gcSweepsDesc, st.Sweeps)
	ch <- prometheus.MustNewConstMetric(gcItemP99Desc, prometheus.GaugeValue, st.ItemTime.P99.Seconds())
	ch <- prometheus.MustNewConstMetric(gcItemMaxDesc, prometheus.GaugeValue, st.ItemTime.Max.Seconds())
	ch <- prometheus.MustNewConstMetric(gcDeathP99Desc, prometheus.GaugeValue, st.DeathToDestruction.P99.Seconds())
}

// RegisterNamespaces adds the seccomp agent's key namespaces, read from
// nss at scrape time (ukeyd gives package agent's Agent.Namespaces): for each,
// its keys, bytes, processes and containers, and the calls it has
// served and refused, labelled pod (its sandbox's id) or container (the
// container's id, for a container's own), the other label empty. A
// namespace's series are there from its making to its end, and with it
// after a hand-over (the calls and refusals go on from their counts);
// an ended one's are not, so that the series are as many as the
// namespaces alive. No label carries a key's description.
func (m *Metrics) RegisterNamespaces(reg prometheus.Registerer, nss func() []wire.NamespaceStatus) {
	reg.MustRegister(namespaceCollector{nss})
}

// namespaceCollector reads the namespaces once per scrape.
type namespaceCollector struct{ nss func() []wire.NamespaceStatus }

var (
	nsLabels       = []string{"pod", "container"}
	nsKeysDesc     = prometheus.NewDesc("ukeyd_namespace_keys", "Keys of a container's or a pod's key namespace, as its share counts them.", nsLabels, nil)
	nsBytesDesc    = prometheus.NewDesc("ukeyd_namespace_bytes", "Bytes of a key namespace's keys, as its share counts them.", nsLabels, nil)
	nsProcsDesc    = prometheus.NewDesc("ukeyd_namespace_processes", "Processes a key namespace keeps.", nsLabels, nil)
	nsCtrsDesc     = prometheus.NewDesc("ukeyd_namespace_containers", "Containers in a key namespace.", nsLabels, nil)
	nsCallsDesc    = prometheus.NewDesc("ukeyd_namespace_calls_total", "Intercepted key calls a key namespace has served.", nsLabels, nil)
	nsRefusalsDesc = prometheus.NewDesc("ukeyd_namespace_refusals_total", "Intercepted key calls of a key namespace refused for permission, a quota or a bound (EACCES, EPERM, EDQUOT, EMFILE, ENFILE).", nsLabels, nil)
	namespaceDescs = []*prometheus.Desc{nsKeysDesc, nsBytesDesc, nsProcsDesc, nsCtrsDesc, nsCallsDesc, nsRefusalsDesc}
)

func (namespaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range namespaceDescs {
		ch <- d
	}
}

func (c namespaceCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[2]string]bool{}
	for _, ns := range c.nss() {
		labels := [2]string{ns.ID, ""}
		if ns.Kind != "pod" {
			labels = [2]string{"", ns.ID}
		}
		// A container's id may name an old namespace waiting for its
		// last listener beside the new one, which comes first: one
		// series each.
		if seen[labels] {
			continue
		}
		seen[labels] = true
		gauge := func(d *prometheus.Desc, v int) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels[0], labels[1])
		}
		gauge(nsKeysDesc, ns.Keys)
		gauge(nsBytesDesc, ns.Bytes)
		gauge(nsProcsDesc, ns.Processes)
		gauge(nsCtrsDesc, len(ns.Containers))
		ch <- prometheus.MustNewConstMetric(nsCallsDesc, prometheus.CounterValue, float64(ns.Calls), labels[0], labels[1])
		ch <- prometheus.MustNewConstMetric(nsRefusalsDesc, prometheus.CounterValue, float64(ns.Refusals), labels[0], labels[1])
	}
}
