// Package rcu is a read-copy-update engine for Go with a Tasks flavour: the
// machinery that lets readers run without locks while writers defer
// reclamation until no reader can still hold what they removed.
//
// # Model
//
// A [Domain] is one independent RCU instance. Two kinds of readers hold its
// grace periods back:
//
//   - Read sections, for any goroutine: s := d.Read() … s.End(). A section
//     may block and may nest. A grace period that starts after a section
//     began does not end before the section does. Entering and leaving a
//     section touches one per-processor counter, so readers on different
//     processors never contend.
//
//   - Tasks, for long-lived goroutines (server workers, collectors): t :=
//     d.Register(name). A task has no sections; a grace period waits until
//     every task that was online when it began has passed a quiescent state
//     (t.Quiescent, t.Checkpoint), gone offline (t.Offline around blocking
//     waits) or unregistered. This is liburcu's QSBR flavour and the
//     kernel's Tasks RCU. t.Checkpoint costs one atomic load when no grace
//     period waits, so every long loop can call it every iteration: the
//     kernel learned the hard way that a loop which only yields
//     (cond_resched) never reports a quiescent state and holds every
//     synchronize_rcu_tasks caller for the whole loop.
//
// Writers wait for a grace period with [Domain.Synchronize], defer work past
// one with [Domain.Call] (and wait for all deferred work with
// [Domain.Barrier]), or poll with [Domain.Start] and [Domain.Done] when they
// must not block. [Value] is a typed pointer that retires old versions
// through Call.
//
// # Grace periods
//
// Grace periods are batched: every Synchronize caller that arrives while
// one runs shares the next one, so a hundred concurrent callers cost two
// grace periods, not a hundred. They are event-driven: the last section to
// end or the last task to report wakes the waiter; nothing on the path
// sleeps for a fixed time (the kernel once slept a whole second per check
// of its holdout list). On an idle domain the caller runs the grace period
// itself and wakes no other goroutine.
//
// When a grace period is older than the stall timeout ([WithStallTimeout])
// the domain reports what holds it: the tasks that have not reported, with
// their goroutine stacks, and the read sections still open. Reports repeat
// at doubling intervals until the grace period ends.
//
// # Misuse
//
// Mistakes that would deadlock or corrupt panic with a message that says
// what happened: ending a section twice, a task reporting after
// [Task.Unregister] or while offline, Barrier from a callback. Synchronize,
// [Domain.Wait] or Barrier inside a read section of the same domain, or from
// an online task of it, panic in builds with -race or -tags
// ukeys_invariants, where the domain tracks which goroutine holds what (in
// other builds the check would cost a microsecond per section).
package rcu
