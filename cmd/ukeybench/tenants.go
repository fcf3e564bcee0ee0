package main

import (
	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/server"
)

// The tenants scenario: one tenant at each of its bounds in turn while
// a host user and a process of another container are served, their
// latency beside an idle run (issue 33, findings 3, 10, 11, 13).

// tenantsParams are the parameters of the tenants scenario.
type tenantsParams struct {
	Phases     []string `json:"phases"`
	DurationMS float64  `json:"duration_ms"` // per phase
	// IntervalUS is the pause of each victim between two reads (0: as
	// fast as it can).
	IntervalUS float64 `json:"interval_us"`
	// CostlyConns: the CPU attacker's connections, each sending add_key
	// of a certificate with a corrupted signature (phase cpu).
	CostlyConns int `json:"costly_conns"`
	// SubUIDs: the uids of one user namespace owned by the connection
	// attacker, each trying the per-uid bound's worth of connections
	// (phase conns); RetryMS the pause of each between two attempts once
	// refused.
	SubUIDs int     `json:"subuids"`
	RetryMS float64 `json:"retry_ms"`
	// SpinEveryUS: the spinning attacker's request period (phase spin).
	SpinEveryUS float64 `json:"spin_every_us"`
	NoFile      int     `json:"nofile"`
	GOMAXPROCS  int     `json:"gomaxprocs"`
	// GoProcs is Go's count of processors before -procs: ukeyd reads
	// its Limits (MaxExpensive) before it applies its own -procs.
	GoProcs int `json:"go_procs"`
	// The bounds in force, filled in by the run: the daemon's (a host
	// user's share per uid, a user namespace's uids counted as its
	// owner's), the containers' together, one container's and one uid's
	// in a container.
	Limits     server.Limits `json:"limits"`
	Containers agent.Bounds  `json:"containers"`
	Container  agent.Bounds  `json:"container"`
	UIDInOne   agent.Bounds  `json:"uid_in_container"`
}

// tenantPhases are the scenario's phases, in the order they run.
var tenantPhases = []string{"idle", "cpu", "conns", "spin", "bigkey"}

// tenantEnv makes this program one of the scenario's processes: a
// victim or an attacker (its role).
const tenantEnv = "UKEYBENCH_TENANT"
