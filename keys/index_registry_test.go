package keys

import "testing"

// Positions freed by removals go to the next keys indexed: an index
// emptied and filled again grows its registry by no more than the
// shards' imbalance (each reuses the positions its own removals freed),
// and every key is found through its new position.
func TestRegistryReusesPositions(t *testing.T) {
	const n = 10_000
	var x serialIndex
	defer x.close()
	ks := fillIndex(&x, n)
	if got := x.reg.end(); got != n {
		t.Fatalf("%d positions for %d keys", got, n)
	}
	for _, k := range ks {
		if !x.remove(k) {
			t.Fatalf("key %d not removed", k.serial)
		}
	}
	for pos := range uint32(n) {
		if k := x.reg.get(pos); k != nil {
			t.Fatalf("position %d still holds key %d", pos, k.serial)
		}
	}
	again := make([]*Key, n)
	for i := range again {
		again[i] = &Key{keyRec: new(keyRec)}
		if _, ok := x.insertExact(again[i], Serial(n+i+3)); !ok {
			t.Fatal("serial taken")
		}
	}
	if got := x.reg.end(); got > n+n/20 {
		t.Fatalf("refilled with %d keys, the registry grew to %d positions", n, got)
	}
	seen := map[*Key]bool{}
	for k := range x.all() {
		seen[k] = true
	}
	for i, k := range again {
		if x.load(Serial(n+i+3)) != k || !seen[k] {
			t.Fatalf("key %d not found after the refill", i)
		}
	}
	if len(seen) != n {
		t.Fatalf("all() yields %d keys, want %d", len(seen), n)
	}
}
