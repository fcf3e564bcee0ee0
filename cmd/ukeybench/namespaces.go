package main

// The namespaces scenario: intercepted keyctl_read latency of a
// container's process while the agent holds 1 key namespace, then
// many, then 1 again, in one run (issue 36, item 6: 1,000 namespaces
// within 1.2x the latency of one), with what each namespace costs of
// the daemon's heap and goroutines.

// namespacesParams are the parameters of the namespaces scenario.
type namespacesParams struct {
	// Counts are the namespaces the agent holds in each window, in
	// order (the measured container's among them); the first is the
	// baseline, and the scenario measures it again at the end.
	Counts     []int   `json:"counts"`
	DurationMS float64 `json:"duration_ms"` // per window
	NoFile     int     `json:"nofile"`
	GOMAXPROCS int     `json:"gomaxprocs"`
}

// idleEnv makes this program the init of an idle container of the
// namespaces scenario.
const idleEnv = "UKEYBENCH_IDLE_CONTAINER"
