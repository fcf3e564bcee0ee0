package metrics

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/wire"
)

// namespaceSeries gathers reg and returns the ukeyd_namespace_* series
// by "name{pod,container}".
func namespaceSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	gather(t, reg, func(name string) bool { return strings.HasPrefix(name, "ukeyd_namespace_") },
		func(name string, labels map[string]string, v float64) {
			out[name+"{"+labels["pod"]+","+labels["container"]+"}"] = v
		})
	return out
}

// A namespace's series are there while it is, labelled by its pod or
// its container, and gone once it has ended: as many series as
// namespaces, however many have come and gone.
func TestNamespaceSeries(t *testing.T) {
	var mu sync.Mutex
	nss := []wire.NamespaceStatus{
		{Kind: "pod", ID: "sandbox1", Containers: []string{"app", "sidecar"}, Keys: 3, Bytes: 120, Processes: 2, Calls: 10, Refusals: 1},
		{Kind: "container", ID: "ctr1", Containers: []string{"ctr1"}, Keys: 1, Bytes: 16, Processes: 1, Calls: 5},
		// An old container of a reused id, waiting for its last
		// listener: the live one's series only.
		{Kind: "container", ID: "ctr1", Containers: []string{"ctr1"}, Keys: 9},
	}
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.RegisterNamespaces(reg, func() []wire.NamespaceStatus {
		mu.Lock()
		defer mu.Unlock()
		return nss
	})
	got := namespaceSeries(t, reg)
	want := map[string]float64{
		"ukeyd_namespace_keys{sandbox1,}": 3, "ukeyd_namespace_bytes{sandbox1,}": 120, "ukeyd_namespace_processes{sandbox1,}": 2,
		"ukeyd_namespace_containers{sandbox1,}": 2, "ukeyd_namespace_calls_total{sandbox1,}": 10, "ukeyd_namespace_refusals_total{sandbox1,}": 1,
		"ukeyd_namespace_keys{,ctr1}": 1, "ukeyd_namespace_bytes{,ctr1}": 16, "ukeyd_namespace_processes{,ctr1}": 1,
		"ukeyd_namespace_containers{,ctr1}": 1, "ukeyd_namespace_calls_total{,ctr1}": 5, "ukeyd_namespace_refusals_total{,ctr1}": 0,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	mu.Lock()
	nss = nss[:1]
	mu.Unlock()
	for k := range namespaceSeries(t, reg) {
		if strings.Contains(k, "ctr1") {
			t.Errorf("an ended namespace's series is still there: %s", k)
		}
	}
}
