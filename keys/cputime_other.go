//go:build !linux

package keys

import "time"

// threadCPU reports that per-thread CPU time is not measured here.
func threadCPU() (time.Duration, bool) { return 0, false }
