// Package procs decides how many Go processors (GOMAXPROCS) ukeyd runs
// with.
//
// Go's scheduler lets a goroutine run for 10 ms before it preempts it
// for another that waits. When more goroutines want to run than there are
// processors (two requests that keep a processor busy and the key
// collector on a two-processor machine), the one that waits waits 10 to
// 20 ms, where the kernel's scheduler would have switched within a slice
// of a millisecond or two. With one processor more than Go's default the
// third goroutine runs on a thread of its own, and the kernel shares the
// processors among the threads in its short slices: in ukeybench gc, on
// two processors, the worst foreground operation while a million keys
// are reaped then stays near the baseline's instead of several times it
// (docs/figures.md, "collector").
//
// The extra processor is not taken where Go's default is below the
// processors the process may run on: that is a CPU quota (a container's
// cpu.max), and running more threads than the quota allows would use it
// up early in each period and have the whole process throttled until the
// next.
package procs
