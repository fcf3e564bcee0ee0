package keys

import (
	"fmt"
	"io"
)

// The flags a key keeps across a hand-over. The others are the
// collector's (dead), construction's (under construction: Export refuses
// while one is under way) or recomputed (in quota).
const exportedFlags = flagRevoked | flagInvalidated | flagUIDKeyring | flagBuiltin | flagLogin | flagInQuota

// CallerState is what a daemon hands over of one caller: its credentials
// and the serials of its keyrings (0 for none), its request_key default
// destination, and its assumed authority (which does not survive a
// hand-over: see Restore.Caller).
type CallerState struct {
	Cred                     Cred
	Thread, Process, Session Serial
	Authority                Serial
	ReqKeyDefault            int
}

// State returns what a daemon hands over of c (Restore.Caller).
func (c *Caller) State() CallerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := CallerState{Cred: *c.cr(), ReqKeyDefault: int(c.jit)}
	st.Cred.Groups = append([]uint32(nil), st.Cred.Groups...)
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

// Export writes the service's state to w as a state stream (StateVersion):
// the tunables, every key with its owner, permissions, flags, state,
// expiry (which is also when a revoked key's gc_delay runs from) and
// payload, every keyring's links in listing order, the restrictions, and
// the special keyrings. The caller's records (CallerState) go after it,
// written by the daemon.
//
// The service must be quiescent: the daemon stops serving first. Export
// fails with EBUSY while a key is under construction (its request-key
// helper could not finish it in the daemon that takes over). Request-key
// authorisation keys are not written: they die with their construction.
// Export wipes its buffers before it returns; what it wrote to w is the
// caller's to wipe.
func (s *Service) Export(w io.Writer) error {
	e := newStateWriter(w)
	pinned, err := s.exportKeys()
	defer func() {
		for _, k := range pinned {
			k.put()
		}
	}()
	if err != nil {
		return err
	}
	e.raw([]byte(stateMagic))
	e.uvarint(StateVersion)
	t := s.Tunables()
	for _, v := range []int64{int64(t.GCDelay), int64(t.MaxKeys), int64(t.MaxBytes), int64(t.RootMaxKeys), int64(t.RootMaxBytes), int64(t.PersistentExpiry)} {
		e.varint(v)
	}

	e.uvarint(uint64(len(pinned)))
	sec := s.dom.Read()
	for i, k := range pinned {
		if i%1024 == 1023 {
			// Grace periods go on between batches of keys.
			sec.End()
			sec = s.dom.Read()
		}
		s.exportKey(e, k)
	}
	sec.End()

	var rings []*Key
	var restricted []*Key
	for _, k := range pinned {
		if !k.isKeyring() {
			continue
		}
		if snap := k.ring.Load(); snap != nil && snap.n > 0 {
			rings = append(rings, k)
		}
		if k.restriction() != nil {
			restricted = append(restricted, k)
		}
	}
	e.uvarint(uint64(len(rings)))
	for _, ring := range rings {
		snap := ring.ring.Load()
		ls := snap.links()
		n := 0
		for _, l := range ls {
			if exportable(l.key) {
				n++
			}
		}
		e.uvarint(uint64(ring.serial))
		e.uvarint(snap.next)
		e.uvarint(uint64(n))
		for _, l := range ls {
			if exportable(l.key) {
				e.uvarint(uint64(l.key.serial))
				e.uvarint(l.slot)
			}
		}
	}

	e.uvarint(uint64(len(restricted)))
	for _, ring := range restricted {
		r := ring.restriction()
		e.uvarint(uint64(ring.serial))
		if r == rejectAll {
			e.uvarint(0)
			continue
		}
		e.uvarint(1)
		e.str(asymmetricType.Name)
		e.str(r.spec)
	}

	s.specialMu.Lock()
	specials := []*Key{s.register, s.persist, s.trust.builtin, s.trust.secondary}
	s.specialMu.Unlock()
	for _, k := range specials {
		if k == nil {
			e.uvarint(0)
		} else {
			e.uvarint(uint64(k.serial))
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

// exportKeys returns, each with a reference taken, the keys Export
// writes: the named keyrings first, in the order of the service's list
// of keyrings by name (oldest first: that order decides which a join by
// name finds), then every other key. A key on its way to destruction is
// left out; nothing can refer to it any more.
func (s *Service) exportKeys() ([]*Key, error) {
	var out []*Key
	named := make(map[*Key]bool)
	s.namesMu.Lock()
	for _, l := range s.names {
		for _, k := range l {
			if exportable(k) && k.tryGet() {
				out = append(out, k)
				named[k] = true
			}
		}
	}
	s.namesMu.Unlock()
	var c indexCursor
	var batch []*Key
	for done := false; !done; {
		batch, done = s.index.scan(&c, 4096, batch[:0])
		for _, k := range batch {
			if named[k] || !exportable(k) {
				continue
			}
			if k.tryGet() {
				out = append(out, k)
			}
		}
	}
	clear(batch)
	for _, k := range out {
		if k.underConstruction() && k.state.Load() == stateUninstantiated {
			return out, EBUSY
		}
	}
	return out, nil
}

// exportKey writes one key's record. The caller is in a read section.
func (s *Service) exportKey(e *stateWriter, k *Key) {
	t := k.typ.Load()
	e.uvarint(uint64(k.serial))
	e.str(t.Name)
	e.str(k.desc)
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
	p := k.payload.Load()
	if p == nil {
		e.uvarint(0) // revoked: its payload is gone
		return
	}
	e.uvarint(1)
	if err := t.export(p, e.bytes); err != nil && e.err == nil {
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
