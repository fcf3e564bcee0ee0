package keys

import (
	"testing"

	"pgregory.net/rapid"
)

// TestIndexScanProperty interleaves a chunked scan of the serial index
// with insertions and removals that grow and shrink its tables: every key
// indexed for the whole scan must be returned, nothing else than keys
// indexed at some point during it, and no chunk longer than its bound.
func TestIndexScanProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		x := &serialIndex{}
		next := Serial(3)
		add := func() *Key {
			k := &Key{keyRec: new(keyRec)}
			x.insert(k, next)
			next += Serial(rapid.IntRange(1, 5000).Draw(rt, "gap"))
			return k
		}
		var live []*Key
		for range rapid.IntRange(0, 400).Draw(rt, "initial") {
			live = append(live, add())
		}
		stable := map[*Key]bool{} // indexed for the whole scan so far
		ever := map[*Key]bool{}
		for _, k := range live {
			stable[k], ever[k] = true, true
		}
		seen := map[*Key]bool{}
		var c indexCursor
		chunk := rapid.IntRange(1, 64).Draw(rt, "chunk")
		for done := false; !done; {
			var ks []*Key
			ks, done = x.scan(&c, chunk, nil)
			if len(ks) > chunk {
				rt.Fatalf("chunk of %d keys, bound %d", len(ks), chunk)
			}
			for _, k := range ks {
				if !ever[k] {
					rt.Fatalf("scan returned a key that was never indexed")
				}
				seen[k] = true
			}
			for range rapid.IntRange(0, 40).Draw(rt, "changes") {
				if len(live) > 0 && rapid.Bool().Draw(rt, "remove") {
					i := rapid.IntRange(0, len(live)-1).Draw(rt, "victim")
					x.remove(live[i])
					delete(stable, live[i])
					live = append(live[:i], live[i+1:]...)
				} else {
					k := add()
					live = append(live, k)
					ever[k] = true
				}
			}
		}
		for k := range stable {
			if !seen[k] {
				rt.Fatalf("key %d, indexed throughout, was not returned", k.serial)
			}
		}
	})
}
