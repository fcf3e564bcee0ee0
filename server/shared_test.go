package server

import (
	"testing"
	"time"

	"github.com/ukeys/ukeys/keys"
)

// Servers given one Slots (the daemon's and its seccomp agent's
// containers') share one bound of expensive operations (a signature
// check, dh_compute): with the daemon's slots all held, another
// Server's operation waits, and runs once one is free. Each container
// Server with a bound of its own would let a hundred containers run a
// hundred checks at once on two processors.
func TestServersShareExpensiveSlots(t *testing.T) {
	slots := NewSlots(1)
	svc := keys.New()
	defer svc.Close()
	host := New(svc, Config{Limits: Limits{MaxExpensive: 1, MaxExpensivePerUID: 1}, Expensive: slots})
	defer host.Shutdown(t.Context())
	other := keys.New()
	defer other.Close()
	ctr := New(other, Config{Limits: Limits{MaxExpensive: 1, MaxExpensivePerUID: 1}, Expensive: slots})
	defer ctr.Shutdown(t.Context())

	host.usage.heavy <- struct{}{} // the host's one slot, held
	ran := make(chan struct{})
	go ctr.expensive(0, func() { close(ran) })
	select {
	case <-ran:
		t.Fatal("an expensive operation ran while every slot it shares was held")
	case <-time.After(50 * time.Millisecond):
	}
	if got := ctr.Stats().ExpensiveRunning; got != 1 {
		t.Errorf("the other Server counts %d expensive operations running, want the shared slot's 1", got)
	}
	<-host.usage.heavy
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("an expensive operation did not run once the shared slot was free")
	}
}

// A thawed Server counts the processes it was handed in its pool, as the
// frozen one had taken them, since each is given back as it goes
// (dropProc): a namespace the seccomp agent thawed used to give back
// what it never took, so that every hand-over loosened the containers'
// bound.
func TestThawedProcessesCountInThePool(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	pool := NewPool(100)
	s := New(svc, Config{Pool: pool})
	defer s.Shutdown(t.Context())
	s.mu.Lock()
	s.usage.restoreProc(1000)
	held := pool.n
	s.usage.dropProc(1000)
	s.mu.Unlock()
	if held != 1 || pool.n != 0 {
		t.Fatalf("the pool holds %d with a process restored, %d once it is gone; want 1 and 0", held, pool.n)
	}
}
