package keys

import "github.com/ukeys/ukeys/internal/secmem"

// Read returns a key's payload (KEYCTL_READ); for a keyring, the serials
// of its links in listing order. Any failure to find the key reads as
// [ENOKEY], as in the kernel.
func (c *Caller) Read(id Serial) ([]byte, error) {
	b, err := c.read(id, heapBytes)
	return b, wrap("keyctl_read", id, err)
}

// heapBytes makes n bytes in Go's heap: Read's copy, the caller's.
func heapBytes(n int) []byte { return make([]byte, n) }

// arenaBytes makes n bytes in secmem's arena (locked, never dumped), for
// a copy freed (secmem.Free) once it has been used.
func arenaBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return secmem.Alloc(n)
}

// ReadInto reads a key's payload into buf as keyctl_read(3) does on a
// current kernel: it returns the payload's length, and copies the payload
// only when buf can hold all of it (so a short or nil buf asks for the
// size). It allocates nothing on the common path.
func (c *Caller) ReadInto(id Serial, buf []byte) (int, error) {
	n, ok, err := c.readFast(id, buf, nil, nil)
	if !ok {
		// The payload crosses a copy of read's own: in the arena, and
		// freed (wiped) once copied, as the caller's buffer is the
		// payload's only copy it keeps.
		var out []byte
		if out, err = c.read(id, arenaBytes); err == nil {
			n = len(out)
			if n <= len(buf) {
				secmem.Copy(buf, out)
			}
			secmem.Free(out)
		}
	}
	return n, wrap("keyctl_read", id, err)
}

// read returns a copy of a key's payload, made by alloc.
func (c *Caller) read(id Serial, alloc func(int) []byte) ([]byte, error) {
	var fast []byte
	if _, ok, err := c.readFast(id, nil, &fast, alloc); ok {
		return fast, err
	}
	r, err := c.lookupUserKey(id, 0, needDefer)
	if err != nil {
		return nil, ENOKEY // the kernel reports every lookup failure so
	}
	defer r.put()
	k := r.key
	if err := k.negativeErr(); err != nil {
		return nil, err
	}
	if !permitted(k, c.cr(), r.possessed, Read) && !r.possessed {
		return nil, EACCES
	}
	t := k.typ.Load()
	if k.isKeyring() {
		if err := k.validate(c.s.now()); err != nil {
			return nil, err
		}
		sec := c.s.dom.Read()
		links := k.loadRing().links()
		sec.End()
		out := make([]byte, 0, 4*len(links))
		for _, l := range links {
			v := uint32(l.key.serial)
			out = append(out, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
		return out, nil
	}
	if t == authType {
		// A used or revoked authorisation reads as the kernel's does.
		if err := k.validate(c.s.now()); err != nil {
			return nil, err
		}
		if k.authRec() == nil {
			return nil, ENOKEY
		}
		return append([]byte(nil), k.authRec().callout...), nil
	}
	if t.Read == nil && t.ReadAs == nil {
		return nil, EOPNOTSUPP
	}
	if err := k.validate(c.s.now()); err != nil {
		return nil, err
	}
	sec := c.s.dom.Read()
	p := k.loadPayload()
	if p == nil {
		sec.End()
		return nil, EKEYREVOKED
	}
	var data []byte
	if t.ReadAs != nil {
		data, err = t.ReadAs(c, p)
	} else {
		data, err = t.Read(p)
	}
	var out []byte
	if err == nil {
		out = alloc(len(data)) // copied before the section ends
		secmem.Copy(out, data) // through no vector register a signal could write out
		wipeIfFresh(p, data)
	}
	sec.End()
	return out, err
}

// wipeIfFresh wipes what a type's Read or ReadAs returned for p once it
// has been copied, if the type made it for the read (a sealed big_key's
// plaintext, decrypted for each read) rather than handing over p's own
// bytes, which stay the key's until it is destroyed.
func wipeIfFresh(p *Payload, data []byte) {
	if len(data) > 0 && (len(p.Data) == 0 || &data[0] != &p.Data[0]) {
		clear(data)
	}
}

// readFast serves the common read, a positive serial naming a key of a
// readable type that is not under construction, in one rcu read section
// and without taking a reference: the section keeps the key from being
// destroyed and its payload from being wiped until it ends. ok is false
// for everything else (special ids, keyrings, authorisations, keys being
// constructed), which read serves the general way. The checks and their
// order are read's: lookup, negative state, permission, validity.
//
// The payload is copied before the section ends: into a new slice made by
// alloc and stored in *out when out is not nil, otherwise into dst if it
// fits. n is the payload's length.
func (c *Caller) readFast(id Serial, dst []byte, out *[]byte, alloc func(int) []byte) (n int, ok bool, err error) {
	if id <= 0 {
		return 0, false, nil
	}
	s := c.s
	sec := s.dom.Read()
	defer sec.End()
	k := s.lookup(id)
	if k == nil || k.usage.Load() <= 0 {
		return 0, true, ENOKEY
	}
	t := k.typ.Load()
	if t == keyringType || t == authType || t.Read == nil || k.underConstruction() {
		return 0, false, nil
	}
	possessed := c.possessesIn(k)
	now := s.now()
	if err := k.negativeErr(); err != nil {
		return 0, true, err
	}
	if !possessed && !permitted(k, c.cr(), false, Read) {
		return 0, true, EACCES
	}
	if err := k.validate(now); err != nil {
		return 0, true, err
	}
	p := k.loadPayload()
	if p == nil {
		return 0, true, EKEYREVOKED
	}
	data, err := t.Read(p)
	if err != nil {
		return 0, true, err
	}
	switch {
	case out != nil:
		*out = alloc(len(data))
		secmem.Copy(*out, data) // through no vector register a signal could write out
	case len(data) <= len(dst):
		secmem.Copy(dst, data)
	}
	n = len(data)
	wipeIfFresh(p, data)
	return n, true, nil
}
