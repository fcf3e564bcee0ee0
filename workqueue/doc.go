// Package workqueue runs work items on a bounded pool of goroutines, with
// the semantics of the Linux kernel's workqueues: a pending bit that makes
// repeated requests collapse into one run, delayed work, flushing,
// synchronous cancellation, and a watchdog that reports items that run too
// long.
//
// # Model
//
// A [Work] is a named function created once with [NewWork] and scheduled as
// often as needed. A [Queue], created with [New] on an [rcu.Domain], runs
// scheduled items on its workers.
//
//   - Pending bit. [Queue.Schedule] on an item that is already pending
//     does nothing and returns false (the kernel's schedule_work): a request
//     that arrives while one is waiting is served by the waiting one. This
//     costs two atomic loads, so producers may call Schedule freely.
//
//   - Runs. The pending bit is cleared just before the item's function
//     runs, so an item scheduled while it runs is queued again and runs
//     once more after the current run: no request made after a run began
//     is lost. An item never runs concurrently with itself on the same
//     queue; the new instance waits behind the running one.
//
//   - Delayed work. [Queue.ScheduleAfter] makes the item runnable when a
//     timer fires (queue_delayed_work). [Queue.Reschedule] sets the delay
//     whether or not the item is pending (mod_delayed_work), which pulls a
//     distant run earlier or pushes a near one back. A delay of zero means
//     now.
//
//   - [Queue.Flush] waits for every item that was runnable when it was
//     called (flush_workqueue), not for items queued later nor for delayed
//     items whose timer has not fired. [Queue.FlushWork] waits for one
//     item's pending and running instances, making a delayed instance
//     runnable at once (flush_delayed_work).
//
//   - [Queue.Cancel] removes an item's pending instance and waits for its
//     running instance to finish (cancel_delayed_work_sync); the item cannot
//     requeue itself meanwhile, so on return it is idle.
//
//   - [Queue.Close] stops accepting work and drains: delayed items run at
//     once, queued items run, and items running during the drain may
//     schedule their continuation, which runs too (drain_workqueue). Then
//     the workers and the watchdog stop. Nothing scheduled is lost.
//
// # Workers are rcu tasks
//
// Each worker is a task of the queue's rcu domain. It is online while it
// runs an item, reports a quiescent state after every item, and goes offline
// while it waits for work. So an idle queue never holds a grace period, a
// queue busy with short items holds one only until the items in progress
// end, and an item may read rcu-protected data of the domain without
// entering a read section. The flip side: a grace period of the domain waits
// for every item running when it began, so items should run in bounded
// chunks (process a batch, save a cursor, schedule the item again), an item
// that loops calls Checkpoint on the task it receives ([NewTaskWork]), and
// an item must not call the domain's Synchronize, Wait or Barrier, which
// would wait for the item itself.
//
// # Watchdog and statistics
//
// When an item has been running longer than the watchdog threshold
// ([WithWatchdog], [DefaultWatchdog]), the queue reports its name, how long
// it has been running and the stack of the worker goroutine running it, and
// repeats the report at doubling intervals while the run lasts. The watchdog
// costs nothing while the queue is idle: its timer is armed only when an
// item starts. [Queue.Stats] returns counters and latency summaries of run
// times and of waits for a worker.
//
// # Misuse
//
// Calls that would wait for themselves panic with a message that says so:
// Cancel or FlushWork of an item from its own function, Flush or Close
// from an item of the same queue. Scheduling an item on a queue while it is
// pending or running on another one panics too.
package workqueue
