package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/server"
)

// The density scenario: what an idle key namespace of the seccomp agent
// costs, made as the agent makes a container's (agent.IdleNamespaces):
// heap and goroutines each, for a few counts of them (issue 36, item 6:
// a node runs hundreds of pods).

// densityParams are the parameters of the density scenario.
type densityParams struct {
	// Namespaces are the counts of idle namespaces measured, each from
	// none.
	Namespaces []int `json:"namespaces"`
	// TargetKiB is the bound of an idle namespace's heap.
	TargetKiB float64 `json:"target_kib"`
}

// runDensity measures, in one agent, what its commons cost (one rcu
// domain and one collectors' queue, made with its first namespace and
// shared by every other), then each count of idle namespaces in turn
// beside them: the heap (after a collection) and goroutines they add,
// each, and what is left once they have ended.
func runDensity(p densityParams, prog *progress) (report, error) {
	rep := report{Scenario: "density", Params: p}
	a := agent.New(agent.Config{Server: server.Config{}})
	defer a.Shutdown(context.Background())
	add := func(cs string, n int, h0 uint64, g0 int, h1 uint64, g1 int, heapExtra, gExtra map[string]any) {
		heap := float64(int64(h1)-int64(h0)) / float64(n) / 1024
		gs := float64(g1-g0) / float64(n)
		rep.Results = append(rep.Results,
			row{Case: cs, Variant: "heap", Unit: "KiB", N: int64(n), Min: heap, Avg: heap, Max: heap, P50: heap, P99: heap, P999: heap, Extra: heapExtra},
			row{Case: cs, Variant: "goroutines", Unit: "goroutines", N: int64(n), Min: gs, Avg: gs, Max: gs, P50: gs, P99: gs, P999: gs, Extra: gExtra})
	}
	prog.say("density: the agent's commons, with its first namespace")
	h0, g0 := heapInUse(), runtime.NumGoroutine()
	first := a.IdleNamespaces(1)
	h1, g1 := heapInUse(), runtime.NumGoroutine()
	add("first", 1, h0, g0, h1, g1, map[string]any{}, map[string]any{})
	for _, n := range p.Namespaces {
		prog.say(fmt.Sprintf("density: %d idle namespaces", n))
		h1, g1 := heapInUse(), runtime.NumGoroutine()
		end := a.IdleNamespaces(n)
		h2, g2 := heapInUse(), runtime.NumGoroutine()
		end()
		h3, g3 := heapInUse(), runtime.NumGoroutine()
		add(fmt.Sprint(n), n, h1, g1, h2, g2,
			map[string]any{"target_kib": p.TargetKiB, "left_after_end_kib": float64(int64(h3)-int64(h1)) / float64(n) / 1024},
			map[string]any{"left_after_end": g3 - g1})
	}
	first()
	h4, g4 := heapInUse(), runtime.NumGoroutine()
	rep.notes = append(rep.notes,
		"first: the agent's first namespace, which makes the commons every other shares (one rcu domain and one collectors' queue, "+
			"their goroutines and histograms); each count beside: what an idle namespace adds.",
		fmt.Sprintf("Once every namespace has ended: %+.1f KiB of heap and %+d goroutines against before the first.",
			float64(int64(h4)-int64(h0))/1024, g4-g0))
	return rep, nil
}

// heapInUse is the heap in use once a collection has run.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
