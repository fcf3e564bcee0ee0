package goroutine

import (
	"strings"
	"sync"
	"testing"
)

func TestIDDistinctPerGoroutine(t *testing.T) {
	self := ID()
	if self <= 0 {
		t.Fatalf("ID() = %d, want a positive id", self)
	}
	if again := ID(); again != self {
		t.Fatalf("ID() changed within one goroutine: %d then %d", self, again)
	}
	var other int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); other = ID() }()
	wg.Wait()
	if other == self || other <= 0 {
		t.Fatalf("other goroutine's ID = %d, self = %d", other, self)
	}
}

func parkedHere(ready chan<- int64, release <-chan struct{}) {
	ready <- ID()
	<-release
}

func TestStacksFindsParkedGoroutine(t *testing.T) {
	ready := make(chan int64)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() { parkedHere(ready, release); close(done) }()
	id := <-ready
	st := Stacks(id, -1)
	close(release)
	<-done
	if len(st) != 1 {
		t.Fatalf("Stacks returned %d entries, want 1 (the dead id -1 is skipped)", len(st))
	}
	if !strings.Contains(st[id], "parkedHere") {
		t.Fatalf("stack of goroutine %d does not name parkedHere:\n%s", id, st[id])
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte("goroutine 42 [running]:\nmain.main()"))
	f.Add([]byte("goroutine  [x"))
	f.Add([]byte("goroutine 99999999999999999999 [x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := parseHeader(b)
		if ok && !strings.HasPrefix(string(b), "goroutine ") {
			t.Fatalf("accepted %q as id %d", b, id)
		}
	})
}
