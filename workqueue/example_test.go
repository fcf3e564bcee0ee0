package workqueue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ukeys/ukeys/rcu"
	"github.com/ukeys/ukeys/workqueue"
)

// Requests that arrive while an item is pending collapse into one run, and
// a delayed item can be pulled earlier.
func Example() {
	d := rcu.New()
	defer d.Close()
	q := workqueue.New(d, workqueue.WithName("example"), workqueue.WithWorkers(2))
	defer q.Close()

	runs := 0
	gc := workqueue.NewWork("gc", func() { runs++ })

	fmt.Println(q.ScheduleAfter(gc, time.Hour))
	fmt.Println(q.Schedule(gc))      // already pending: nothing to do
	fmt.Println(q.Reschedule(gc, 0)) // was pending; now due at once
	if _, err := q.FlushWork(context.Background(), gc); err != nil {
		panic(err)
	}
	fmt.Println("runs:", runs)
	// Output:
	// true
	// false
	// true
	// runs: 1
}

// Long jobs run in bounded chunks: each run does a little, keeps its
// cursor, and schedules the next chunk. Close runs the chain to its end.
func ExampleQueue_Close() {
	d := rcu.New()
	defer d.Close()
	q := workqueue.New(d, workqueue.WithWorkers(1))

	keys, cursor, chunks := 10, 0, 0
	var scan *workqueue.Work
	scan = workqueue.NewWork("scan", func() {
		cursor = min(cursor+4, keys) // process up to 4 keys
		chunks++
		if cursor < keys {
			q.Schedule(scan) // continue in a later item
		}
	})
	q.Schedule(scan)
	q.Close()
	fmt.Println("scanned", cursor, "keys in", chunks, "chunks")
	// Output: scanned 10 keys in 3 chunks
}
