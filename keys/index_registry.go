package keys

import (
	"sync"
	"sync/atomic"
)

// keyRegistry holds every indexed key at a position of its own, handed
// out in the order keys are indexed, in blocks of registryChunk: the
// kernel's key_jar, in spirit. The serial index's tables and the leaves
// of the keyrings' tries hold positions, not pointers, so the registry is
// how Go's collector reaches the keys, block by block in the order they
// were allocated, which lets it mark the keys of one span together:
// pointers in the tables or in the trie's leaves (in hash order) would
// make the mark of a million keys half as long again or more
// (BenchmarkMillionKeys).
//
// A position freed by a removal goes back to its shard (indexShard.free)
// and to the next key that shard indexes, so that neither side takes a
// lock of the registry's: positions are counted atomically and only a
// new block is published under grow. The registry therefore holds as
// many positions as the sum of the shards' peaks, a little more than the
// peak of keys indexed at once (1% more after 10,000 keys were removed
// and as many others indexed), and keeps them after a mass removal: 12
// bytes a position, as the index's tables held 8 to 16 bytes a key
// before they shrank.
type keyRegistry struct {
	blocks atomic.Pointer[[]*registryBlock]
	next   atomic.Uint32 // positions below next have been handed out
	grow   sync.Mutex
}

const (
	registryBits  = 10
	registryChunk = 1 << registryBits
)

type registryBlock [registryChunk]atomic.Pointer[Key]

// get returns the key at pos, nil if there is none.
func (r *keyRegistry) get(pos uint32) *Key {
	bs := r.blocks.Load()
	if bs == nil || int(pos>>registryBits) >= len(*bs) {
		return nil
	}
	return (*bs)[pos>>registryBits][pos&(registryChunk-1)].Load()
}

// end is one past the highest position handed out.
func (r *keyRegistry) end() uint32 { return r.next.Load() }

// add stores k at a position from free (the caller's shard's, guarded by
// its lock), or at a new one, and returns it.
func (r *keyRegistry) add(k *Key, free *[]uint32) uint32 {
	var pos uint32
	if n := len(*free); n > 0 {
		pos = (*free)[n-1]
		*free = (*free)[:n-1]
	} else {
		pos = r.next.Add(1) - 1
		r.reach(pos)
	}
	(*r.blocks.Load())[pos>>registryBits][pos&(registryChunk-1)].Store(k)
	return pos
}

// reach makes sure the block holding pos exists.
func (r *keyRegistry) reach(pos uint32) {
	if bs := r.blocks.Load(); bs != nil && int(pos>>registryBits) < len(*bs) {
		return
	}
	r.grow.Lock()
	defer r.grow.Unlock()
	var bs []*registryBlock
	if p := r.blocks.Load(); p != nil {
		bs = *p
	}
	if int(pos>>registryBits) < len(bs) {
		return
	}
	grown := append(bs[:len(bs):len(bs)], make([]*registryBlock, int(pos>>registryBits)+1-len(bs))...)
	for i := len(bs); i < len(grown); i++ {
		grown[i] = new(registryBlock)
	}
	r.blocks.Store(&grown)
}

// remove empties pos and gives it to free (the caller's shard's).
func (r *keyRegistry) remove(pos uint32, free *[]uint32) {
	(*r.blocks.Load())[pos>>registryBits][pos&(registryChunk-1)].Store(nil)
	*free = append(*free, pos)
}
