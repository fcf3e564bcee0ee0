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
	notify(r.key, NotifyCleared, 0)
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

// Unlink removes a key's link from a keyring (KEYCTL_UNLINK). Only Write
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

// Move flags.
const (
	// MoveExcl makes Move fail with EEXIST rather than displace a key of
	// the same type and description in the destination (KEYCTL_MOVE_EXCL).
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
	k := kr.key
	if l, ok := from.key.loadRing().find(k.typeName(), k.description()); !ok || l.key != k {
		return ENOENT
	}
	replaced, err := c.s.linkSilently(to.key, k.get(), true, flags&MoveExcl != 0)
	if err != nil {
		k.put()
		return err
	}
	unlinked, err := c.s.unlinkSilently(from.key, k)
	// Watchers hear of the move as the kernel's key_move tells them:
	// unlinked from the source, then linked into the destination.
	if err == nil {
		notify(from.key, NotifyUnlinked, unlinked.serial)
	}
	notify(to.key, NotifyLinked, k.serial)
	if unlinked != nil {
		c.s.putLater(unlinked)
	}
	if replaced != nil {
		c.s.putLater(replaced)
	}
	return err
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
	replaced, err := s.linkSilently(ring, k, checkRestriction, excl)
	if err != nil {
		return err
	}
	notify(ring, NotifyLinked, k.serial)
	if replaced != nil {
		s.putLater(replaced)
	}
	return nil
}

// linkSilently is link without the notification: it returns the key whose
// link k replaced (nil if none), whose reference the caller puts once it
// has notified.
func (s *Service) linkSilently(ring, k *Key, checkRestriction, excl bool) (replaced *Key, _ error) {
	if !ring.isKeyring() {
		return nil, ENOTDIR
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
		return nil, EKEYREVOKED
	}
	// Build the next version first (one walk of the trie tells whether a
	// link is replaced); it is published only if every check passes.
	next, old, replacing := ring.loadRing().with(&s.index, k)
	if replacing && excl {
		ring.mu.Unlock()
		return nil, EEXIST
	}
	if !replacing {
		if err := s.chargeLink(ring, linkCost); err != nil {
			ring.mu.Unlock()
			return nil, err
		}
	}
	undo := func(err error) error {
		if !replacing {
			s.chargeLink(ring, -linkCost)
		}
		ring.mu.Unlock()
		return err
	}
	if r := ring.restriction(); checkRestriction && r != nil {
		if err := r.check(ring, k); err != nil {
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
	}
	ring.mu.Unlock()
	if replacing {
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
// whatever key occupies that slot.
func (s *Service) unlinkFrom(ring, k *Key) error {
	old, err := s.unlinkSilently(ring, k)
	if err != nil {
		return err
	}
	notify(ring, NotifyUnlinked, old.serial)
	s.putLater(old) // the key stays findable until the collector drops it
	return nil
}

// unlinkSilently is unlinkFrom without the notification: it returns the
// key unlinked, whose reference the caller puts once it has notified.
func (s *Service) unlinkSilently(ring, k *Key) (*Key, error) {
	if !ring.isKeyring() {
		return nil, ENOTDIR
	}
	ring.mu.Lock()
	next, old, ok := ring.loadRing().without(k.typeName(), k.description())
	if !ok {
		ring.mu.Unlock()
		return nil, ENOENT
	}
	ring.storeRing(next)
	old.key.removeParent(ring)
	s.chargeLink(ring, -linkCost)
	ring.mu.Unlock()
	return old.key, nil
}

// clearRing drops every link of ring.
func (s *Service) clearRing(ring *Key) {
	ring.mu.Lock()
	old := s.detachRing(ring, &ringSnap{})
	if old != nil {
		s.chargeLink(ring, -linkCost*old.n)
	}
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
// key states are ignored; revoked keyrings are not descended into.
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
