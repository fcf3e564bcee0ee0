package tuning

import (
	"time"

	"github.com/ukeys/ukeys/workqueue"
)

// GC tunes the key collector.
type GC struct {
	// ChunkSize bounds how many units of work (keys examined, links
	// visited or pruned, keys destroyed) one work item does, if
	// ChunkSizeSet; 0 then means unbounded, the kernel's behaviour before
	// it learnt to process in chunks.
	ChunkSize    int
	ChunkSizeSet bool
	// ItemCPUTime measures each work item's CPU time (GCStats.ItemCPU).
	// It pins the worker to its thread for each item, which slows Go's
	// hand-offs of the processors enough to lengthen the worst foreground
	// operation of a mass expiry under CPU-bound goroutines.
	ItemCPUTime bool
	// Queue, if set, runs the collector instead of a queue of its own.
	Queue *workqueue.Queue
	// ReleaseDelay, if ReleaseDelaySet, is how long a link removed from
	// a keyring (unlinked, displaced, cleared) keeps holding its key, and
	// so the key findable by serial, before the collector drops the
	// reference (keys.DefaultReleaseDelay otherwise). Tests set it long to
	// look at a key in that window, benchmarks to 0.
	ReleaseDelay    time.Duration
	ReleaseDelaySet bool
}
