package main

// syscallParams are the parameters of the syscall scenario.
type syscallParams struct {
	Callers    []int   `json:"callers"`
	DurationMS float64 `json:"duration_ms"`
	// Variants, if set, are those to run: floor, kernel, intercepted,
	// socket.
	Variants []string `json:"variants,omitempty"`
}

// childEnv makes this program a caller of the syscall scenario: the
// variant, and where its listener or socket goes.
const childEnv = "UKEYBENCH_SYSCALL_CHILD"
