package metrics

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// counts gathers reg and returns operations_total by "op/errno".
func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	gather(t, reg, func(name string) bool { return name == "ukeyd_operations_total" },
		func(_ string, labels map[string]string, v float64) { out[labels["op"]+"/"+labels["errno"]] += v })
	return out
}

// gather gathers reg and calls each with every series of the metrics
// whose names keep keeps: its metric's name, its labels and its value (a
// counter's, or else a gauge's).
func gather(t *testing.T, reg *prometheus.Registry, keep func(name string) bool, each func(name string, labels map[string]string, v float64)) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !keep(mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetGauge().GetValue()
			if m.GetCounter() != nil {
				v = m.GetCounter().GetValue()
			}
			each(mf.GetName(), labels, v)
		}
	}
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

// gathered returns every sample of reg by name and label values.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// The service's quota records and the key collector's counters are
// exported per uid and per reason, and read afresh at every scrape.
func TestServiceMetrics(t *testing.T) {
	tun := keys.DefaultTunables()
	tun.GCDelay = 0
	svc := keys.New(keys.WithTunables(tun))
	defer svc.Close()
	reg := prometheus.NewRegistry()
	New(reg).RegisterService(reg, svc)
	c := svc.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 7})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	var ids []keys.Serial
	for i := range 5 {
		id, err := c.AddKey("user", "k"+strconv.Itoa(i), []byte("secret-payload"), keys.SessionKeyring)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	k, b := svc.QuotaUsage(1000)
	got := gathered(t, reg)
	if got["ukeyd_quota_keys/1000"] != float64(k) || got["ukeyd_quota_bytes/1000"] != float64(b) {
		t.Fatalf("quota series %v/%v, want %d keys and %d bytes", got["ukeyd_quota_keys/1000"], got["ukeyd_quota_bytes/1000"], k, b)
	}
	if got["ukeyd_quota_max_keys/1000"] != float64(tun.MaxKeys) || got["ukeyd_quota_max_bytes/1000"] != float64(tun.MaxBytes) {
		t.Fatalf("quota limits %v/%v, want %d/%d", got["ukeyd_quota_max_keys/1000"], got["ukeyd_quota_max_bytes/1000"], tun.MaxKeys, tun.MaxBytes)
	}
	if err := c.Revoke(ids[0]); err != nil {
		t.Fatal(err)
	}
	svc.RequestGC()
	if err := svc.WaitGC(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = gathered(t, reg)
	if got["ukeyd_gc_pruned_links_total/revoked"] != 1 || got["ukeyd_gc_destroyed_total"] < 1 || got["ukeyd_gc_passes_total"] < 1 {
		t.Fatalf("collector series after reaping a revoked key: %v", got)
	}
	if k2, _ := svc.QuotaUsage(1000); got["ukeyd_quota_keys/1000"] != float64(k2) || k2 != k-1 {
		t.Fatalf("quota keys %v after the reap, want %d", got["ukeyd_quota_keys/1000"], k-1)
	}
}

// The server's gauges show what callers hold of it beside its bounds.
func TestServerMetrics(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	reg := prometheus.NewRegistry()
	m := New(reg)
	srv := server.New(svc, server.Config{Metrics: m, Limits: server.Limits{MaxConns: 40, MaxProcs: 30, MaxBuffered: 1 << 20}})
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	ln, err := server.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Shutdown(context.Background())
		<-done
	}()
	m.RegisterServer(reg, srv)
	gauges := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			out[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
		return out
	}
	var conns []*client.Client
	for range 3 {
		c, err := client.Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	if _, err := conns[0].Status(); err != nil { // every connection has been accepted by now
		t.Fatal(err)
	}
	testutil.Eventually(t, "three connections counted", func() bool { return gauges()["ukeyd_connections"] == 3 })
	g := gauges()
	if g["ukeyd_processes"] != 1 || g["ukeyd_connections_max"] != 40 || g["ukeyd_processes_max"] != 30 || g["ukeyd_buffered_bytes_max"] != 1<<20 {
		t.Fatalf("gauges %v", g)
	}
}
