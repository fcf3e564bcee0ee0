package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Eventually waits for cond to hold, failing the test after a generous
// limit. It checks liveness, never speed: the limit only bounds a hang.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// StillBlocked asserts that ch has not fired after giving the system a
// moment to misbehave: a safety check (something must not happen), so a
// slow machine can only hide a bug, never invent one.
func StillBlocked[T any](t testing.TB, what string, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s completed, but it must still be blocked", what)
	case <-time.After(30 * time.Millisecond):
	}
}

// Recv waits for a value from ch, failing the test after a generous limit
// instead of hanging until the test binary's -timeout kills every test at
// once: a liveness check, never speed.
func Recv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// Buffer is a [bytes.Buffer] that a daemon's log or a child's output may
// be written to from other goroutines while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns a copy of what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
