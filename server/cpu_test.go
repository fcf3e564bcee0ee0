package server

import (
	"testing"
	"time"

	"github.com/ukeys/ukeys/keys"
)

// The budget's arithmetic: a new account runs at once, an operation
// beyond the account's share is paid for by a wait four times as long,
// and what is saved is bounded.
func TestCPUAccount(t *testing.T) {
	var a cpuAccount
	t0 := time.Unix(1000, 0)
	if d := a.wait(t0); d != 0 {
		t.Fatalf("a new account waits %v, want 0", d)
	}
	a.charge(t0.Add(10*time.Millisecond), 10*time.Millisecond)
	// 10 ms used from 2.5 ms earned: 7.5 ms owed, paid in 30 ms.
	if d := a.wait(t0.Add(10 * time.Millisecond)); d != 30*time.Millisecond {
		t.Fatalf("after 10 ms of work in 10 ms: wait %v, want 30ms", d)
	}
	if !a.owes(t0.Add(39 * time.Millisecond)) {
		t.Fatal("the account owes nothing before its debt is paid")
	}
	if a.owes(t0.Add(40 * time.Millisecond)) {
		t.Fatal("the account still owes once its debt is paid")
	}
	if a.wait(t0.Add(time.Hour)); a.balance != cpuBurst {
		t.Fatalf("an hour idle saved %v, want the burst %v", a.balance, cpuBurst)
	}
}

// One uid that keeps the daemon's expensive slot busy pays with its own
// wait: after an operation longer than its share, its next one waits
// (at least the debt: a lower bound, which no slow machine breaks),
// while another uid's account owes nothing and runs at once; and the
// debt outlives the uid's connections (closing them all and coming back
// would otherwise wipe it).
func TestExpensiveOperationsPayForTheirTime(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{Limits: Limits{MaxExpensive: 1, MaxExpensivePerUID: 1}})
	defer s.Shutdown(t.Context())

	const attacker, other = 1801, 1802
	work := 20 * time.Millisecond
	if err := s.expensive(attacker, func() { time.Sleep(work) }); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.usage.forget(attacker) // as when its last connection closes
	u := s.usage.byUID[attacker]
	s.mu.Unlock()
	if u == nil {
		t.Fatal("an account in debt was forgotten when it held nothing else")
	}
	start := time.Now()
	if err := s.expensive(attacker, func() {}); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 2*work {
		t.Errorf("the uid's next expensive operation after %v of work waited %v, want at least %v", work, waited, 2*work)
	}
	s.mu.Lock()
	owes := s.usage.of(other).cpu.wait(time.Now())
	s.mu.Unlock()
	if owes != 0 {
		t.Errorf("another uid must wait %v for the first uid's work", owes)
	}
}
