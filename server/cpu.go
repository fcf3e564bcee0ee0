package server

import (
	"sync"
	"time"
)

// An expensive operation (a signature check, dh_compute, pkey_*) runs
// under two bounds of how many at once (Limits.MaxExpensive and
// MaxExpensivePerUID), which keep processors free, but a bound of how
// many at once still lets one account keep a processor busy for as long
// as it asks, at the cost of every other user's latency
// (TestExpensiveOperationsPayForTheirTime). So each account (as chargeUID
// counts them) also pays for what it used: its operations may take a
// quarter of one processor's time over time, in bursts; an account that
// used more waits before its next one, and its wait is the only one. The
// kernel charges the same work to the calling task, its cgroup and its
// nice level; the daemon runs it at the lowest priority too ([nice.Run]).

// cpuShare: an account's expensive operations may take one nanosecond in
// cpuShare of the time that passes.
const cpuShare = 4

// cpuBurst bounds what an account may have saved: a few operations of
// the usual cost at once, with no wait.
const cpuBurst = 50 * time.Millisecond

// cpuAccount is what an account has used of its share. A new account has
// nothing saved and no debt: its first operation runs at once.
type cpuAccount struct {
	mu      sync.Mutex
	balance time.Duration // saved (> 0) or owed (< 0) at at
	at      time.Time
}

// settle brings the balance up to now. a.mu is held.
func (a *cpuAccount) settle(now time.Time) {
	if a.at.IsZero() {
		a.at = now
	}
	if now.After(a.at) {
		a.balance = min(a.balance+now.Sub(a.at)/cpuShare, cpuBurst)
		a.at = now
	}
}

// wait returns how long the account must wait at now before its next
// operation: until what it owes is paid.
func (a *cpuAccount) wait(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(now)
	if a.balance >= 0 {
		return 0
	}
	return -a.balance * cpuShare
}

// charge takes d, an operation's time, from the balance at now.
func (a *cpuAccount) charge(now time.Time, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(now)
	a.balance -= d
}

// owes reports whether the account is still paying at now: its usage is
// kept meanwhile, so that closing every connection and making new ones
// does not wipe the debt.
func (a *cpuAccount) owes(now time.Time) bool {
	return a.wait(now) > 0
}
