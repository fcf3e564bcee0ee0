package keys

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time. With WithGCTuning's ItemCPUTime the
// collector pins its goroutine to the thread for one work item and reads
// it at both ends, which tells the work an item did from the time it
// spent descheduled.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
