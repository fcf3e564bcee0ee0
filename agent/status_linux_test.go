package agent_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/server/metrics"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// byID returns the namespaces by "kind/id".
func byID(nss []wire.NamespaceStatus) map[string]wire.NamespaceStatus {
	out := map[string]wire.NamespaceStatus{}
	for _, ns := range nss {
		out[ns.Kind+"/"+ns.ID] = ns
	}
	return out
}

// seriesOf returns the ukeyd_namespace_* series reg has, as
// "name{pod,container}".
func seriesOf(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ukeyd_namespace_") {
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
			out[mf.GetName()+"{"+labels["pod"]+","+labels["container"]+"}"] = v
		}
	}
	return out
}

// The agent says of each namespace, a pod's and a container's own, its
// containers, keys, processes, calls and refusals; its metrics have a
// series of each for each namespace while it lives, carried with it by
// a hand-over, and none once it has ended.
func TestAgentNamespacesStatusAndMetrics(t *testing.T) {
	ukeystest.NeedRoot(t, "to give containers and pods namespaces of their own")
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("needs nsenter (util-linux)")
	}
	// Two big_key files for a container, one for a uid in it: the
	// second is refused.
	a, sock := agentTest(t, t.TempDir(), agent.Config{Bounds: agent.Bounds{BigKeyFiles: 16}})
	sa, side := startPodA(t, sock)
	c := runInContainer(t, sock, "ctr-c", "fill-big", "big")
	if got := c.result(t); got != "1 disk quota exceeded" {
		t.Fatalf("container c filling big_key files: %s", got)
	}
	reg := prometheus.NewRegistry()
	metrics.New(reg).RegisterNamespaces(reg, a.Namespaces)

	check := func(a *agent.Agent, when string) {
		t.Helper()
		nss := a.Namespaces()
		t.Logf("%s: %+v", when, nss)
		if len(nss) != 2 || nss[0].Kind != "pod" {
			t.Fatalf("%s: namespaces %+v, want pod-a's first, then ctr-c's", when, nss)
		}
		got := byID(nss)
		pod, ctr := got["pod/pod-a"], got["container/ctr-c"]
		if !slices.Equal(pod.Containers, []string{"a-side", "pod-a"}) || pod.Keys < 1 || pod.Processes < 2 || pod.Calls < 2 || pod.Refusals != 0 {
			t.Errorf("%s: pod a: %+v", when, pod)
		}
		if !slices.Equal(ctr.Containers, []string{"ctr-c"}) || ctr.Keys < 1 || ctr.Processes < 1 || ctr.Calls < 2 || ctr.Refusals != 1 {
			t.Errorf("%s: container c: %+v", when, ctr)
		}
	}
	check(a, "before the hand-over")
	before := byID(a.Namespaces())
	series := seriesOf(t, reg)
	for k, want := range map[string]float64{
		"ukeyd_namespace_containers{pod-a,}":     2,
		"ukeyd_namespace_calls_total{pod-a,}":    float64(before["pod/pod-a"].Calls),
		"ukeyd_namespace_refusals_total{,ctr-c}": 1,
		"ukeyd_namespace_keys{,ctr-c}":           float64(before["container/ctr-c"].Keys),
		"ukeyd_namespace_bytes{,ctr-c}":          float64(before["container/ctr-c"].Bytes),
	} {
		if got, ok := series[k]; !ok || got != want {
			t.Errorf("%s = %v (%t), want %v", k, got, ok, want)
		}
	}
	if len(series) != 12 {
		t.Errorf("%d series, want 6 of each of 2 namespaces: %v", len(series), series)
	}

	b := handOver(t, a)
	if nss := a.Namespaces(); len(nss) != 0 {
		t.Errorf("the old agent still says %+v", nss)
	}
	check(b, "after the hand-over")
	after := byID(b.Namespaces())
	for k, ns := range before {
		if after[k].Calls < ns.Calls || after[k].Refusals != ns.Refusals {
			t.Errorf("%s: calls and refusals %d, %d before the hand-over, %d, %d after", k, ns.Calls, ns.Refusals, after[k].Calls, after[k].Refusals)
		}
	}
	reg = prometheus.NewRegistry()
	metrics.New(reg).RegisterNamespaces(reg, b.Namespaces)
	if got := seriesOf(t, reg)["ukeyd_namespace_refusals_total{,ctr-c}"]; got != 1 {
		t.Errorf("container c's refusals after the hand-over: %v", got)
	}

	// Container c ends: its series go; the pod's stay with it.
	c.exit()
	testutil.Eventually(t, "container c to be reaped", func() bool { return len(b.Namespaces()) == 1 })
	for k := range seriesOf(t, reg) {
		if strings.Contains(k, "ctr-c") {
			t.Errorf("an ended namespace's series is still there: %s", k)
		}
	}
	sa.exit()
	side.exit()
	testutil.Eventually(t, "pod a to be reaped", func() bool { return len(b.Namespaces()) == 0 })
	if series := seriesOf(t, reg); len(series) != 0 {
		t.Errorf("series of ended namespaces: %v", series)
	}
}
