package keys

import "github.com/ukeys/ukeys/keyctl"

// Clear removes every link from a keyring (KEYCTL_CLEAR).
func (c *Caller) Clear(ringID Serial) error {
	r, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return wrap("keyctl_clear", ringID, err)
	}
	defer r.put()
	if !r.key.isKeyring() {
		return wrap("keyctl_clear", ringID, ENOTDIR)
	}
	c.s.clearRing(r.key)
	return nil
}

// Link links a key into a keyring (KEYCTL_LINK), replacing a link to a key
// of the same type and description.
func (c *Caller) Link(id, ringID Serial) error {
	return wrap("keyctl_link", id, c.link(id, ringID))
}

func (c *Caller) link(id, ringID Serial) error {
	ring, err := c.lookupUserKey(ringID, lookupCreate, Write)
	if err != nil {
		return err
	}
	defer ring.put()
	r, err := c.lookupUserKey(id, lookupCreate, Link)
	if err != nil {
		return err
	}
	if err := c.s.linkInto(ring.key, r.key, true); err != nil {
		r.put()
		return err
	}
	return nil
}

// Unlink removes a key's link from a keyring (KEYCTL_UNLINK). Only [Write]
// on the keyring is needed, not any permission on the key.
func (c *Caller) Unlink(id, ringID Serial) error {
	return wrap("keyctl_unlink", id, c.unlink(id, ringID))
}

func (c *Caller) unlink(id, ringID Serial) error {
	ring, err := c.lookupUserKey(ringID, 0, Write)
	if err != nil {
		return err
	}
	defer ring.put()
	r, err := c.lookupUserKey(id, lookupPartial, needUnlink)
	if err != nil {
		return err
	}
	defer r.put()
	return c.s.unlinkFrom(ring.key, r.key)
}

// [Caller.Move] flags.
const (
	// MoveExcl makes [Caller.Move] fail with [EEXIST] rather than displace a
	// key of the same type and description in the destination
	// (KEYCTL_MOVE_EXCL).
	MoveExcl = keyctl.MoveExcl
)

// Move moves a key's link from one keyring to another (KEYCTL_MOVE).
func (c *Caller) Move(id, from, to Serial, flags uint32) error {
	return wrap("keyctl_move", id, c.move(id, from, to, flags))
}

func (c *Caller) move(id, fromID, toID Serial, flags uint32) error {
	if flags&^MoveExcl != 0 {
		return EINVAL
	}
	kr, err := c.lookupUserKey(id, lookupCreate, Link)
	if err != nil {
		return err
	}
	defer kr.put()
	from, err := c.lookupUserKey(fromID, 0, Write)
	if err != nil {
		return err
	}
	defer from.put()
	to, err := c.lookupUserKey(toID, lookupCreate, Write)
	if err != nil {
		return err
	}
	defer to.put()
	if from.key == to.key {
		return nil
	}
	if !from.key.isKeyring() || !to.key.isKeyring() {
		return ENOTDIR
	}
	replaced, err := c.s.moveLink(kr.key, from.key, to.key, flags&MoveExcl != 0)
	if replaced != nil {
		c.s.putLater(replaced)
	}
	return err
}

// moveLink moves k's link from one keyring to another in one step, as
// the kernel's key_move: under both keyrings' locks, taken in the order
// of their serials, it checks that the source has a link in k's place
// (ENOENT) and that k may be linked into the destination (linkLocked's
// checks), then unlinks and links, and posts what key_move posts, in its
// order: the source's unlink, then the destination's link. A key of the
// same type and description that the link displaces gets no record (only
// the destination's link tells of it), as in the kernel. It returns the
// displaced key, whose reference the caller hands to the collector
// (putLater).
func (s *Service) moveLink(k, from, to *Key, excl bool) (replaced *Key, err error) {
	if !from.isKeyring() || !to.isKeyring() {
		return nil, ENOTDIR
	}
	if k.isKeyring() {
		s.linkMu.Lock()
		defer s.linkMu.Unlock()
	}
	first, second := from, to
	if to.serial < from.serial {
		first, second = to, from
	}
	first.mu.Lock()
	second.mu.Lock()
	// Like the kernel's, the unlink takes whatever key holds k's slot in
	// the source (its type and description), though the record names k.
	err = ENOENT
	next, old, ok := from.loadRing().without(k.typeName(), k.description())
	if ok {
		replaced, err = s.linkLocked(to, k.get(), true, excl)
	}
	if err == nil {
		from.storeRing(next)
		old.key.removeParent(from)
		s.chargeLink(from, -linkCost)
		notifyLocked(from, NotifyUnlinked, k.serial)
		notifyLocked(to, NotifyLinked, k.serial)
	}
	second.mu.Unlock()
	first.mu.Unlock()
	switch {
	case err == nil:
		s.putLater(old.key) // the source's reference: findable until the collector drops it
	case ok:
		k.put() // the destination's, unused
	}
	return replaced, err
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
// existing link of the same type and description fails with EEXIST. The
// record of the link is posted under the keyring's lock, as the kernel
// posts it under its semaphore, so that a keyring's records come in the
// order of its changes.
func (s *Service) link(ring, k *Key, checkRestriction, excl bool) error {
	if !ring.isKeyring() {
		return ENOTDIR
	}
	if k.isKeyring() {
		// Links of keyrings into keyrings are serialised so that the cycle
		// check sees a stable graph.
		s.linkMu.Lock()
		defer s.linkMu.Unlock()
	}
	ring.mu.Lock()
	replaced, err := s.linkLocked(ring, k, checkRestriction, excl)
	if err == nil {
		notifyLocked(ring, NotifyLinked, k.serial)
	}
	ring.mu.Unlock()
	if replaced != nil {
		s.putLater(replaced)
	}
	return err
}

// linkLocked links k into ring with the kernel's checks in __key_link's
// order, posting nothing: it returns the key whose link k replaced (nil
// if none), whose reference the caller puts once ring.mu is released. It
// consumes one reference to k on success. Called with ring.mu held, and
// s.linkMu if k is a keyring.
func (s *Service) linkLocked(ring, k *Key, checkRestriction, excl bool) (replaced *Key, _ error) {
	if ring.has(flagRevoked | flagInvalidated | flagDead) {
		return nil, EKEYREVOKED
	}
	// Build the next version first (one walk of the trie tells whether a
	// link is replaced); it is published only if every check passes.
	next, old, replacing := ring.loadRing().with(&s.index, k)
	if replacing && excl {
		return nil, EEXIST
	}
	if !replacing {
		if err := s.chargeLink(ring, linkCost); err != nil {
			return nil, err
		}
	}
	undo := func(err error) error {
		if !replacing {
			s.chargeLink(ring, -linkCost)
		}
		return err
	}
	if r := ring.restriction(); checkRestriction && r != nil {
		if err := r.Check(ring, k); err != nil {
			return nil, undo(err)
		}
	}
	if k.isKeyring() {
		if err := s.detectCycle(ring, k); err != nil {
			return nil, undo(err)
		}
	}
	ring.storeRing(next)
	k.addParent(ring)
	if replacing {
		old.key.removeParent(ring)
		return old.key, nil
	}
	return nil, nil
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
	ring.quotalen += int32(delta)
	return nil
}

// unlinkFrom removes the link to k from ring. It fails with ENOENT if ring
// holds no link for k's type and description. Like the kernel, it removes
// whatever key occupies that slot, and posts the record under the
// keyring's lock.
func (s *Service) unlinkFrom(ring, k *Key) error {
	if !ring.isKeyring() {
		return ENOTDIR
	}
	ring.mu.Lock()
	next, old, ok := ring.loadRing().without(k.typeName(), k.description())
	if !ok {
		ring.mu.Unlock()
		return ENOENT
	}
	ring.storeRing(next)
	old.key.removeParent(ring)
	s.chargeLink(ring, -linkCost)
	notifyLocked(ring, NotifyUnlinked, old.key.serial)
	ring.mu.Unlock()
	s.putLater(old.key) // the key stays findable until the collector drops it
	return nil
}

// clearRing drops every link of ring, and posts the record of it.
func (s *Service) clearRing(ring *Key) {
	ring.mu.Lock()
	old := s.detachRing(ring, &ringSnap{})
	if old != nil {
		s.chargeLink(ring, -linkCost*old.n)
	}
	notifyLocked(ring, NotifyCleared, 0)
	ring.mu.Unlock()
	s.releaseLinks(ring, old, true) // the collector drops the references
}

// putAll drops one reference to each of keys, burying those that lose
// their last in batches: a keyring of a million keys cleared at once
// hands them to the collector a chunk at a time, not one by one.
func (s *Service) putAll(keys []*Key) {
	const batch = 1024
	var dying []*Key
	for _, k := range keys {
		if k.putLast() {
			dying = append(dying, k)
			if len(dying) == batch {
				s.unusedBatch(dying)
				dying = nil
			}
		}
	}
	s.unusedBatch(dying)
}

// detectCycle fails with EDEADLK if ring is reachable from k (or is k),
// and with ELOOP if k's tree nests deeper than MaxDepth. Permissions and
// key states are ignored; revoked keyrings are not descended into, but
// one at the level past MaxDepth still fails the link, as the kernel
// checks the depth before it looks at the keyring it would descend to
// (links.golden compares it with the kernel's).
func (s *Service) detectCycle(ring, k *Key) error {
	if ring == k {
		return EDEADLK
	}
	var walk func(at *Key, depth int) error
	walk = func(at *Key, depth int) error {
		snap := at.loadRing()
		if snap == nil {
			return nil
		}
		for _, l := range snap.nested {
			if l.key == ring {
				return EDEADLK
			}
			if depth >= MaxDepth {
				return ELOOP
			}
			if l.key.has(flagRevoked | flagInvalidated) {
				continue
			}
			if err := walk(l.key, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(k, 0)
}
