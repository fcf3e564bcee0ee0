package rcu_test

import (
	"context"
	"fmt"

	"github.com/ukeys/ukeys/rcu"
)

type config struct{ greeting string }

// Readers use the current configuration without locks; a writer publishes
// a new one and the old one is wiped only after every reader has let go.
func Example() {
	d := rcu.New(rcu.WithName("example"))
	defer d.Close()

	cfg := rcu.NewValue(d, &config{greeting: "hello"}, func(old *config) {
		old.greeting = "" // no reader can see this any more
	})

	s := d.Read()
	held := cfg.Load()
	cfg.Store(&config{greeting: "bonjour"}) // old version retired via Call
	fmt.Println("reader still sees:", held.greeting)
	s.End()

	if err := d.Barrier(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println("after the grace period:", held.greeting == "")

	s = d.Read()
	fmt.Println("new readers see:", cfg.Load().greeting)
	s.End()
	// Output:
	// reader still sees: hello
	// after the grace period: true
	// new readers see: bonjour
}

// A long-lived worker registers as a task, checkpoints in its loop and goes
// offline while it blocks.
func ExampleTask() {
	d := rcu.New()
	defer d.Close()

	work := make(chan int)
	done := make(chan int)
	go func() {
		t := d.Register("worker")
		defer t.Unregister()
		sum := 0
		for {
			t.Offline() // blocking: do not hold grace periods
			n, ok := <-work
			t.Online()
			if !ok {
				done <- sum
				return
			}
			for i := range n {
				sum += i
				t.Checkpoint() // one atomic load unless a grace period waits
			}
		}
	}()
	work <- 1000
	if err := d.Synchronize(context.Background()); err != nil {
		panic(err)
	}
	close(work)
	fmt.Println(<-done)
	// Output: 499500
}

// A caller that must not block starts a grace period and polls it.
func ExampleDomain_Start() {
	d := rcu.New()
	defer d.Close()

	c := d.Start()
	for !d.Done(c) {
		// do other useful work; here we simply wait
		if err := d.Wait(context.Background(), c); err != nil {
			panic(err)
		}
	}
	fmt.Println("grace period done:", d.Done(c))
	// Output: grace period done: true
}
