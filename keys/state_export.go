package keys

import (
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"
)

// The flags a key keeps across a hand-over. The others are the
// collector's (dead), construction's (under construction: Export refuses
// while one is under way) or recomputed (in quota).
const exportedFlags = flagRevoked | flagInvalidated | flagUIDKeyring | flagBuiltin | flagLogin | flagInQuota

// CallerState is what a daemon hands over of one caller: its credentials
// and the serials of its keyrings (0 for none), its request_key default
// destination, and its assumed authority (which does not survive a
// hand-over: see [Restore.Caller]).
type CallerState struct {
	Cred                     Cred
	Thread, Process, Session Serial
	Authority                Serial
	ReqKeyDefault            int
}

// State returns what a daemon hands over of c ([Restore.Caller]).
func (c *Caller) State() CallerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := CallerState{Cred: *c.cr(), ReqKeyDefault: int(c.jit)}
	st.Cred.Groups = append([]uint32(nil), st.Cred.Groups...)
	st.Cred.CapsIn = nil // asked of a call being served, which is this daemon's
	for _, f := range []struct {
		k  *Key
		to *Serial
	}{{c.thread.Load(), &st.Thread}, {c.process.Load(), &st.Process}, {c.session.Load(), &st.Session}, {c.auth.Load(), &st.Authority}} {
		if f.k != nil {
			*f.to = f.k.serial
		}
	}
	return st
}

// Export writes the service's state to w as a state stream ([StateVersion]):
// the tunables, every key with its owner, permissions, flags, state,
// expiry (which is also when a revoked key's gc_delay runs from) and
// payload, every keyring's links in listing order, the restrictions, and
// the special keyrings. The caller's records ([CallerState]) go after it,
// written by the daemon.
//
// The service must be quiescent: the daemon stops serving first. Export
// fails with [EBUSY] while a key is under construction (its request-key
// helper could not finish it in the daemon that takes over). Request-key
// authorisation keys are not written: they die with their construction.
// Export wipes its buffers before it returns; what it wrote to w is the
// caller's to wipe.
func (s *Service) Export(w io.Writer) error {
	e := newStateWriter(w)
	e.raw([]byte(stateMagic))
	e.uvarint(StateVersion)
	t := s.Tunables()
	for _, v := range []int64{int64(t.GCDelay), int64(t.MaxKeys), int64(t.MaxBytes), int64(t.RootMaxKeys), int64(t.RootMaxBytes), int64(t.PersistentExpiry)} {
		e.varint(v)
	}
	// How many keys to expect, for the reader to size its index: a hint,
	// since keys may go meanwhile; a serial of 0 ends the keys.
	e.uvarint(uint64(s.Keys()))
	// Each key is written as soon as its place is known, so that a
	// reader on the other end of a pipe makes keys while this side still
	// orders them.
	sec := s.dom.Read()
	n := 0
	x, err := s.exportOrder(func(k *Key) {
		if n++; n%1024 == 0 {
			// Grace periods go on between batches of keys.
			sec.End()
			sec = s.dom.Read()
		}
		s.exportKey(e, k)
	})
	sec.End()
	defer x.release()
	if err != nil {
		// The stream ends here, unfinished. Its buffer holds payloads: it
		// goes out as far as the stream got, and is wiped, as after a
		// whole stream.
		e.flush()
		return err
	}
	e.uvarint(0)

	// Links, by position in the stream: a reader finds each key in a
	// slice, and the keys a keyring holds sit together in it.
	var restricted []int
	withLinks := 0
	for i, ring := range x.keys[:x.rings] {
		if snap := ring.loadRing(); snap != nil && snap.n > 0 {
			withLinks++
		}
		if ring.restriction() != nil {
			restricted = append(restricted, i)
		}
	}
	e.uvarint(uint64(withLinks))
	var entries []uint64
	for i, ring := range x.keys[:x.rings] {
		snap := ring.loadRing()
		if snap == nil || snap.n == 0 {
			continue
		}
		entries = entries[:0]
		group, next := x.groups[i], 0
		keys := x.keys[group.start : group.start+group.n]
		for _, l := range group.links {
			k := l.key
			pos, ok := 0, false
			switch {
			case next < len(keys) && keys[next] == k:
				pos, ok = group.start+next, true
				next++
			default:
				pos, ok = x.pos[k]
			}
			if ok {
				entries = append(entries, uint64(pos), l.slot)
			}
		}
		e.uvarint(uint64(i))
		e.uvarint(snap.next)
		e.uvarint(uint64(len(entries) / 2))
		for _, v := range entries {
			e.uvarint(v)
		}
	}

	e.uvarint(uint64(len(restricted)))
	for _, i := range restricted {
		r := x.keys[i].restriction()
		e.uvarint(uint64(i))
		if r == rejectAll {
			e.uvarint(0)
			continue
		}
		e.uvarint(1)
		e.str(r.typ)
		e.str(r.spec)
	}

	s.specialMu.Lock()
	specials := []*Key{s.register, s.persist, s.trust.builtin, s.trust.secondary}
	s.specialMu.Unlock()
	for _, k := range specials {
		pos, ok := x.pos[k]
		if k == nil || !ok {
			e.uvarint(0)
		} else {
			e.uvarint(uint64(pos) + 1)
		}
	}
	e.str("end")
	return e.flush()
}

// exportable reports whether Export writes k: not an authorisation key
// (it lives only as long as its construction), not a key of an
// unregistered type.
func exportable(k *Key) bool {
	t := k.typ.Load()
	return t != authType && t != deadType && !k.has(flagDead)
}

// exportSet is the keys Export writes, in the order it writes them, each
// with a reference taken.
type exportSet struct {
	keys  []*Key
	rings int // keys[:rings] are the keyrings
	// groups[i] is the keys whose first parent is keyring keys[i], in its
	// listing order, written from keys[start] on.
	groups []exportGroup
	// pos holds the position of each keyring and of each key that more
	// than one keyring links (or none, or whose first parent is not
	// written): the others are found through their group.
	pos map[*Key]int
}

type exportGroup struct {
	start, n int    // its keys are keys[start:start+n]
	links    []link // the keyring's links in listing order, read once
}

func (x *exportSet) release() {
	for _, k := range x.keys {
		k.put()
	}
}

// exportOrder returns the keys Export writes, handing each to emit as
// soon as its place is known: first the keyrings, the
// named ones in the order of the service's list of keyrings by name
// (oldest first: that order decides which one a join by name finds);
// then every other key, grouped by the first keyring that links it, in
// that keyring's listing order (so that a reader builds each keyring from
// keys it has just made, which its cache still holds); then the keys no
// keyring written links. A key on its way to destruction is left out:
// nothing can refer to it any more.
func (s *Service) exportOrder(emit func(*Key)) (*exportSet, error) {
	x := &exportSet{pos: make(map[*Key]int), keys: make([]*Key, 0, s.Keys())}
	var busy bool
	add := func(k *Key) bool {
		if !exportable(k) || !k.tryGet() {
			return false
		}
		if k.underConstruction() && k.state.Load() == stateUninstantiated {
			busy = true
		}
		x.keys = append(x.keys, k)
		if !busy {
			emit(k)
		}
		return true
	}
	s.namesMu.Lock()
	for _, l := range s.names {
		for _, k := range l {
			if add(k) {
				x.pos[k] = len(x.keys) - 1
			}
		}
	}
	s.namesMu.Unlock()
	var c indexCursor
	var batch []*Key
	// Most keys are not keyrings: room for all at once, where growing
	// it copied it over and over.
	others := make([]*Key, 0, s.Keys())
	for done := false; !done; {
		batch, done = s.index.scan(&c, 4096, batch[:0])
		for _, k := range batch {
			if !k.isKeyring() {
				others = append(others, k)
				continue
			}
			if _, seen := x.pos[k]; !seen && add(k) {
				x.pos[k] = len(x.keys) - 1
			}
		}
	}
	clear(batch)
	x.rings = len(x.keys)
	x.groups = make([]exportGroup, x.rings)
	var leaves []leaf
	var warm uint32
	defer func() { warmSink.Store(warm) }()
	for i, ring := range x.keys[:x.rings] {
		g := &x.groups[i]
		g.start = len(x.keys)
		snap := ring.loadRing()
		if snap == nil || snap.n == 0 {
			continue
		}
		// The keyring's links (ringSnap.links), each key read once.
		leaves = snap.sortedLeaves(leaves[:0])
		g.links = make([]link, 0, len(leaves))
		for j := range leaves {
			if j%warmBatch == 0 {
				warm = snap.ix.warmKeys(leaves[j:min(j+warmBatch, len(leaves))], warm)
			}
			k := snap.ix.keyOf(&leaves[j])
			if k == nil {
				continue
			}
			g.links = append(g.links, link{key: k, slot: leaves[j].slot})
			if k.isKeyring() {
				continue
			}
			first, twice := s.linkingParents(k)
			if first != ring || !add(k) {
				continue
			}
			g.n++
			if twice {
				x.pos[k] = len(x.keys) - 1
			}
		}
	}
	for _, k := range others {
		if p, _ := s.linkingParents(k); p != nil {
			if _, written := x.pos[p]; written && p.isKeyring() {
				continue // in p's group
			}
		}
		if add(k) {
			x.pos[k] = len(x.keys) - 1
		}
	}
	clear(others)
	if busy {
		return x, EBUSY
	}
	return x, nil
}

// warmBatch is how many keys warmKeys reads ahead.
const warmBatch = 32

// warmKeys reads a word of each cache line Export reads of the keys the
// leaves ls name (the key, its record, its description, its payload),
// pass by pass, and returns sum plus what it read. The loads of one pass
// do not depend on each other, so the processor waits for their cache
// misses side by side; Export's own reads of a key each wait behind a
// lock, an atomic update or a dependent load, one miss after another,
// which cost most of its time (the keys of a keyring lie far apart in
// memory, made among those of other keyrings).
func (x *serialIndex) warmKeys(ls []leaf, sum uint32) uint32 {
	var buf [warmBatch]*Key
	ks := buf[:0]
	for i := range ls {
		if k := x.reg.get(ls[i].pos); k != nil {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		sum += uint32(uintptr(unsafe.Pointer(k.keyRec))) + k.descLen
	}
	for _, k := range ks {
		sum += k.flags.Load()
		if k.descLen > 0 {
			sum += uint32(*k.desc)
		}
		if p := atomic.LoadPointer(&k.content); p != nil {
			sum += *(*uint32)(p)
		}
	}
	return sum
}

// parents returns the first keyring that links k (nil if none), and
// whether another does too.
func (k *Key) parents() (first *Key, more bool) {
	k.parentsMu.Lock()
	defer k.parentsMu.Unlock()
	e := k.ext.Load()
	return k.parent, e != nil && len(e.parents) > 0
}

// linkingParents is parents for Export: while a keyring's detached links
// wait for the collector (gc_release.go), a key may still list a keyring
// that no longer links it, and only those that do count.
func (s *Service) linkingParents(k *Key) (first *Key, more bool) {
	if s.gcol.releasing.Load() == 0 {
		return k.parents()
	}
	for _, p := range k.parentList() {
		if !linksKey(p, k) {
			continue
		}
		if first != nil {
			return first, true
		}
		first = p
	}
	return first, false
}

// exportKey writes one key's record. The caller is in a read section.
func (s *Service) exportKey(e *stateWriter, k *Key) {
	t := k.typ.Load()
	e.uvarint(uint64(k.serial))
	e.str(t.Name)
	e.str(k.description())
	e.uvarint(uint64(k.uid.Load()))
	e.uvarint(uint64(k.gid.Load()))
	e.uvarint(uint64(k.perm.Load()))
	e.uvarint(uint64(k.flags.Load() & exportedFlags))
	st := k.state.Load()
	e.varint(int64(st))
	e.varint(k.expiry.Load())
	if st != statePositive || t == keyringType {
		return
	}
	p := k.loadPayload()
	if p == nil {
		e.uvarint(0) // revoked: its payload is gone
		return
	}
	e.uvarint(1)
	if err := t.export(p, e.bytesFn); err != nil && e.err == nil {
		e.err = fmt.Errorf("keys: exporting key %d: %w", k.serial, err)
	}
}

// export hands write what Import needs to make p again.
func (t *Type) export(p *Payload, write func([]byte)) error {
	if t.Export != nil {
		return t.Export(p, write)
	}
	write(p.Data)
	return nil
}
