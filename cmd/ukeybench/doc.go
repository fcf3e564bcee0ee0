// Command ukeybench reproduces the kernel measurements that shaped ukeys
// and runs each the old way and the new way in the same run, so that the
// result is a ratio that holds on a noisy machine.
//
// Usage:
//
//	ukeybench [flags] SCENARIO
//
// Scenarios:
//
//	gc      the keygcbench shape: N keys become garbage ("unused",
//	        "expired"; "combined" pools their samples, as keygcbench
//	        does) while foreground goroutines add, read and search keys;
//	        the collector chunked, unchunked (ChunkSize 0, the kernel
//	        before the patch) and a baseline with nothing to reap. "mixed"
//	        is ukeybench's own: half the keys unlinked one at a time
//	        during the run, the other half expired after.
//	gp      a holdout task passes its quiescent state after a random delay;
//	        waited for by a poller that checks once a second (the kernel
//	        before 2018), a poller that starts at 100 ms and backs off to a
//	        second (after Rostedt's patch) and rcu's Synchronize.
//	stall   a registered task runs a long loop that only yields
//	        (runtime.Gosched) or calls Checkpoint; Synchronize meanwhile.
//	read    read-side cost across 1..GOMAXPROCS goroutines: rcu sections,
//	        task checkpoints, sync.RWMutex, atomic.Pointer and a key lookup.
//	expiry  Get/Set latency while N entries expire at once, for the keys
//	        package and the Go caches people use.
//	daemon  round trips through ukeyd's server with K clients, with the
//	        collector idle and busy.
//	syscall keyctl_read of a small key by 1 and 4 calling processes: to a
//	        minimal supervisor in C that answers each call with fixed
//	        bytes (the floor, compiled with cc at run time; skipped with a
//	        note without one), to the kernel, intercepted by ukeys, and
//	        over the socket; the intercepted rows give their p50 and p99
//	        as multiples of the floor's (p50_x_floor, p99_x_floor).
//	tenants a host user and a container's process read keys while one
//	        tenant at a time sits at its bound (CPU, connections of a
//	        user namespace's uids, the protocol's spin, big_key files):
//	        their p50/p99/p99.9 beside an idle run, and the table of the
//	        bounds in force. Needs root.
//	density what an idle key namespace of the seccomp agent costs, made
//	        as the agent makes a container's: heap and goroutines each,
//	        for 1 and 1,000 of them (-idle), beside the agent's commons
//	        (the rcu domain and collectors' queue they share).
//	namespaces
//	        a container's process reads its key through the kernel's
//	        keyctl, intercepted, while the seccomp agent holds 1, then
//	        1,000, then 1 key namespaces again (idle containers handed
//	        to it as runc hands them): each window's p50/p99 against the
//	        first's, and what an idle namespace costs of heap and
//	        goroutines. Needs root.
//
// Every scenario prints a table (or, with -json, one object
// {"scenario", "params", "results"}), shows progress on stderr, and with
// -plot DIR draws latency CDFs and bar charts. -cpuprofile, -mutexprofile
// and -blockprofile show where the time of a run went. scripts/benchmarks.sh
// regenerates docs/figures.md from every scenario.
package main
