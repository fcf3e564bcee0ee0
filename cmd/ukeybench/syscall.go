package main

// syscallParams are the parameters of the syscall scenario.
type syscallParams struct {
	Callers    []int   `json:"callers"`
	DurationMS float64 `json:"duration_ms"`
}

// childEnv makes this program a caller of the syscall scenario: the
// variant, and where its listener or socket goes.
const childEnv = "UKEYBENCH_SYSCALL_CHILD"
