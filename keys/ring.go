package keys

import (
	"math/bits"
	"slices"
)

// ringSnap is one immutable version of a keyring's contents. Readers load
// it from Key.ring inside rcu protection and walk it without locks;
// writers, holding the keyring's mu, build the next version.
type ringSnap struct {
	root   *hnode
	n      int
	nested []link // the keyring-type links, in listing order
	used   uint16 // listing slots 0..15 in use
	next   uint64 // next slot for keyrings of more than 16 links
}

// Listing order follows the kernel's for keyrings of up to 16 links (its
// associative array fits one node then): the first link into an empty
// keyring takes slot 0, each later one the highest free slot, a replaced
// link keeps its slot. Larger keyrings list further links in the order
// they were added.
func (r *ringSnap) orderSlot() uint64 {
	if r.n == 0 {
		return 0
	}
	if free := ^r.used; free != 0 {
		return uint64(15 - bits.LeadingZeros16(free))
	}
	if r.next < 16 {
		return 16
	}
	return r.next
}

func (r *ringSnap) find(typ, desc string) (link, bool) {
	if r == nil {
		return link{}, false
	}
	return hget(r.root, indexHash(typ, desc), typ, desc)
}

// links returns the links in listing order.
func (r *ringSnap) links() []link {
	if r == nil || r.n == 0 {
		return nil
	}
	out := make([]link, 0, r.n)
	hwalk(r.root, func(l link) bool { out = append(out, l); return true })
	slices.SortFunc(out, func(a, b link) int {
		switch {
		case a.slot < b.slot:
			return -1
		case a.slot > b.slot:
			return 1
		}
		return 0
	})
	return out
}

// with returns the version with k linked (replacing any link of the same
// type and description) and the link it replaced.
func (r *ringSnap) with(k *Key) (*ringSnap, link, bool) {
	if r == nil {
		r = &ringSnap{}
	}
	typ, desc := k.typeName(), k.desc
	h := indexHash(typ, desc)
	old, replacing := hget(r.root, h, typ, desc)
	l := link{key: k, slot: old.slot}
	nr := &ringSnap{used: r.used, next: r.next, n: r.n, nested: r.nested}
	if !replacing {
		l.slot = r.orderSlot()
		if l.slot < 16 {
			nr.used |= 1 << l.slot
		} else {
			nr.next = l.slot + 1
		}
		nr.n++
	}
	nr.root, _, _ = hset(r.root, h, l, 0)
	if k.isKeyring() || (replacing && old.key.isKeyring()) {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool { return replacing && e.key == old.key })
		if k.isKeyring() {
			nr.nested = append(nr.nested, l)
			slices.SortFunc(nr.nested, func(a, b link) int { return int(int64(a.slot) - int64(b.slot)) })
		}
	}
	return nr, old, replacing
}

// without returns the version without the link for (typ, desc).
func (r *ringSnap) without(typ, desc string) (*ringSnap, link, bool) {
	if r == nil {
		return r, link{}, false
	}
	root, old, ok := hdel(r.root, indexHash(typ, desc), typ, desc, 0)
	if !ok {
		return r, link{}, false
	}
	nr := &ringSnap{root: root, n: r.n - 1, used: r.used, next: r.next, nested: r.nested}
	if old.slot < 16 {
		nr.used &^= 1 << old.slot
	}
	if nr.n == 0 {
		nr = &ringSnap{}
	}
	if old.key.isKeyring() {
		nr.nested = slices.DeleteFunc(slices.Clone(r.nested), func(e link) bool { return e.key == old.key })
	}
	return nr, old, true
}

// linkCost is what a link charges to the keyring owner's byte quota.
const linkCost = 4

// MaxDepth is how many keyrings deep below the starting keyring searches
// go and links may nest (KEYRING_SEARCH_MAX_DEPTH).
const MaxDepth = 6

// linkInto links k into ring, replacing a link of the same type and
// description: the kernel's __key_link with its checks in order. It
// consumes one reference to k on success. Called without locks held.
func (s *Service) linkInto(ring, k *Key, checkRestriction bool) error {
	return s.link(ring, k, checkRestriction, false)
}

// link is linkInto with the exclusive flag of KEYCTL_MOVE: with excl, an
// existing link of the same type and description fails with EEXIST.
func (s *Service) link(ring, k *Key, checkRestriction, excl bool) error {
	if !ring.isKeyring() {
		return ENOTDIR
	}
	if k.isKeyring() {
		// Links of keyrings into keyrings are serialised so that the cycle
		// check below sees a stable graph.
		s.linkMu.Lock()
		defer s.linkMu.Unlock()
	}
	ring.mu.Lock()
	if ring.has(flagRevoked | flagInvalidated | flagDead) {
		ring.mu.Unlock()
		return EKEYREVOKED
	}
	snap := ring.ring.Load()
	_, replacing := snap.find(k.typeName(), k.desc)
	if replacing && excl {
		ring.mu.Unlock()
		return EEXIST
	}
	if !replacing {
		if err := s.chargeLink(ring, linkCost); err != nil {
			ring.mu.Unlock()
			return err
		}
	}
	undo := func(err error) error {
		if !replacing {
			s.chargeLink(ring, -linkCost)
		}
		ring.mu.Unlock()
		return err
	}
	if checkRestriction && ring.restrict != nil {
		if err := ring.restrict.check(ring, k); err != nil {
			return undo(err)
		}
	}
	if k.isKeyring() {
		if err := s.detectCycle(ring, k); err != nil {
			return undo(err)
		}
	}
	next, old, _ := snap.with(k)
	ring.ring.Store(next)
	ring.mu.Unlock()
	notify(ring, NotifyLinked, k.serial)
	if replacing {
		old.key.put()
	}
	return nil
}

// chargeLink adjusts the keyring owner's byte quota for links. Called with
// ring.mu held.
func (s *Service) chargeLink(ring *Key, delta int) error {
	if !ring.has(flagInQuota) {
		return nil
	}
	if err := s.adjust(ring.quota, delta); err != nil {
		return err
	}
	ring.quotalen += delta
	return nil
}

// unlinkFrom removes the link to k from ring. It fails with ENOENT if ring
// holds no link for k's type and description. Like the kernel, it removes
// whatever key occupies that slot.
func (s *Service) unlinkFrom(ring, k *Key) error {
	if !ring.isKeyring() {
		return ENOTDIR
	}
	ring.mu.Lock()
	next, old, ok := ring.ring.Load().without(k.typeName(), k.desc)
	if !ok {
		ring.mu.Unlock()
		return ENOENT
	}
	ring.ring.Store(next)
	s.chargeLink(ring, -linkCost)
	ring.mu.Unlock()
	notify(ring, NotifyUnlinked, old.key.serial)
	old.key.put()
	return nil
}

// clearRing drops every link of ring.
func (s *Service) clearRing(ring *Key) {
	ring.mu.Lock()
	old := ring.ring.Swap(&ringSnap{})
	if old != nil {
		s.chargeLink(ring, -linkCost*old.n)
	}
	ring.mu.Unlock()
	for _, l := range old.links() {
		l.key.put()
	}
}

// detectCycle fails with EDEADLK if ring is reachable from k (or is k),
// and with ELOOP if k's tree nests deeper than MaxDepth. Permissions and
// key states are ignored; revoked keyrings are not descended into.
func (s *Service) detectCycle(ring, k *Key) error {
	if ring == k {
		return EDEADLK
	}
	var walk func(at *Key, depth int) error
	walk = func(at *Key, depth int) error {
		snap := at.ring.Load()
		if snap == nil {
			return nil
		}
		for _, l := range snap.nested {
			if l.key == ring {
				return EDEADLK
			}
			if l.key.has(flagRevoked | flagInvalidated) {
				continue
			}
			if depth >= MaxDepth {
				return ELOOP
			}
			if err := walk(l.key, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(k, 0)
}
