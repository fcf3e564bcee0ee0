package keys

import (
	"testing"
	"time"
)

// waitShrinker waits until x's shrinker has no table left to shrink.
func waitShrinker(t *testing.T, x *serialIndex) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		x.mu.Lock()
		running := x.running
		x.mu.Unlock()
		if !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the shrinker is still running after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// indexSlots is how many slots the index's tables hold together.
func indexSlots(x *serialIndex) int {
	n := 0
	for i := range x.shards {
		if t := x.shards[i].tab.Load(); t != nil {
			n += len(t.slots)
		}
	}
	return n
}

// fillIndex indexes n keys under serials 3, 4, ...
func fillIndex(x *serialIndex, n int) []*Key {
	ks := make([]*Key, n)
	for i := range ks {
		ks[i] = &Key{keyRec: new(keyRec)}
		if _, ok := x.insertExact(ks[i], Serial(i+3)); !ok {
			panic("serial taken")
		}
	}
	return ks
}

// A removal leaves the shrinking of a table it empties to the shrinker:
// with the shrinker stopped, removing nine keys in ten leaves every table
// as it was. Then, on an index whose shrinker runs, the same removals
// shrink the tables, and the keys left are all found, the removed none.
func TestIndexShrinksOffTheRemover(t *testing.T) {
	const n = 40_000
	var stopped serialIndex
	ks := fillIndex(&stopped, n)
	stopped.close()
	before := indexSlots(&stopped)
	for i, k := range ks {
		if i%10 != 0 && !stopped.remove(k) {
			t.Fatalf("key %d not removed", i)
		}
	}
	if got := indexSlots(&stopped); got != before {
		t.Fatalf("with the shrinker stopped the tables went from %d to %d slots: a removal rebuilt one", before, got)
	}

	var x serialIndex
	defer x.close()
	ks = fillIndex(&x, n)
	for i, k := range ks {
		if i%10 != 0 {
			x.remove(k)
		}
	}
	waitShrinker(t, &x)
	if got := indexSlots(&x); got*3 > before {
		t.Fatalf("tables of %d slots for %d keys (%d before the removals)", got, n/10, before)
	}
	for i := range x.shards {
		tab := x.shards[i].tab.Load()
		if tab.tooEmpty(i) {
			t.Errorf("shard %d left due: %d keys in %d slots", i, tab.live, len(tab.slots))
		}
	}
	for i, k := range ks {
		got := x.load(Serial(i + 3))
		if i%10 == 0 && got != k {
			t.Fatalf("key %d not found after the shrink", i)
		}
		if i%10 != 0 && got != nil {
			t.Fatalf("removed key %d still found", i)
		}
	}
}
