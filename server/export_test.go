package server

import (
	"time"

	"github.com/ukeys/ukeys/keys"
)

// TakeoverFault makes a hand-over fail on purpose (takeoverFault):
// OlderState claims to read the keys' state of the version before this
// one only; HangUpAfterFDs hangs up once the descriptors are received.
type TakeoverFault struct {
	OlderState     bool
	HangUpAfterFDs bool
}

// TakeOverForTest is TakeOver with a fault.
func TakeOverForTest(path string, f TakeoverFault) (*TakeoverResult, error) {
	fault := takeoverFault{hangUpAfterFDs: f.HangUpAfterFDs}
	if f.OlderState {
		fault.stateVersion, fault.setState = keys.StateVersion-1, true
	}
	return takeOver(path, nil, Config{}, fault)
}

// SetHandoverStallTimeout sets handoverStallTimeout for a test, and
// returns the restore.
func SetHandoverStallTimeout(d time.Duration) func() {
	old := handoverStallTimeout
	handoverStallTimeout = d
	return func() { handoverStallTimeout = old }
}

// SetExpensiveHook makes s call f as each expensive operation starts
// (start true) and ends, with the uid it is charged to, while it holds
// its slots.
func SetExpensiveHook(s *Server, f func(uid uint32, start bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expensiveHook = f
}

// WatchPipes returns how many notification pipes s's keys post to.
func WatchPipes(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pipes)
}
