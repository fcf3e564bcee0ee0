package keys

import (
	"unsafe"

	"github.com/ukeys/ukeys/internal/secmem"
)

// Payload is a key's content as its type stores it. Readers reach it only
// inside rcu protection; a replaced payload is wiped after a grace period.
type Payload struct {
	// Extra holds type-specific state (a big_key's sealed file, an
	// encrypted key's blob). If it has a method Wipe(), the payload's end
	// calls it after clearing Data; if it has a method
	// PayloadLen(data int) int, Len answers with it.
	Extra any
	Data  []byte
	// Nothing more: a payload of up to 8 bytes then fits, with its bytes,
	// in 48 bytes (newPayload). Its length in descriptions is Len; what
	// it costs its owner's byte quota is in the key's quotalen
	// (payloadCharge).
}

// Len is the payload's length in descriptions and /proc/keys: its bytes',
// unless its type's state says otherwise (a big_key sealed in a file, an
// encrypted key, described as the kernel reserves them).
func (p *Payload) Len() int {
	if x, ok := p.Extra.(interface{ PayloadLen(data int) int }); ok {
		return x.PayloadLen(len(p.Data))
	}
	return len(p.Data)
}

// payloadCharge is what k's payload costs its owner's byte quota, as
// instantiate, update and restore added it to quotalen. It is counted
// only for a key in quota (others are charged nothing), which is not a
// keyring (whose quotalen counts its links). k.mu is held.
func payloadCharge(k *Key) int {
	if !k.has(flagInQuota) || k.isKeyring() {
		return 0
	}
	return int(k.quotalen) - len(k.description()) - 1
}

// wipe zeroes the payload's bytes: secrets must not outlive the key.
func (p *Payload) wipe() {
	if p == nil {
		return
	}
	clear(p.Data)
	if w, ok := p.Extra.(interface{ Wipe() }); ok {
		w.Wipe()
	}
}

// release is the end of a payload nobody can reach any more (a key's
// destroyed or replaced one after a grace period, or one made and never
// stored): it is wiped, its type's destroy hook (if any) runs, and its
// memory goes back to the arena. Nothing may use p after.
func (p *Payload) release(destroy func(*Payload)) {
	if p == nil {
		return
	}
	p.wipe()
	if destroy != nil {
		destroy(p)
	}
	switch {
	case secmem.Contains(unsafe.Pointer(p)):
		// newPayload's: the record and its bytes are one chunk.
		secmem.Free(unsafe.Slice((*byte)(unsafe.Pointer(p)), payloadHeader+uintptr(len(p.Data))))
	case len(p.Data) > 0 && secmem.Contains(unsafe.Pointer(&p.Data[0])):
		// newPayloadExtra's: the bytes alone.
		d := p.Data
		p.Data = nil
		secmem.Free(d)
	}
}

// payloadHeader is the size of a Payload record before its bytes in a
// chunk newPayload made (a multiple of 8: the bytes follow aligned).
const payloadHeader = unsafe.Sizeof(Payload{})

// newPayload returns a payload holding a copy of data, and nothing in
// Extra, which must stay nil.
//
// The payload and its bytes are one chunk of secmem's arena: outside Go's
// heap, in memory that is locked (never swapped) while the memory lock
// limit allows and never dumped, and wiped when the payload is released
// (release, which every payload's end goes through). One chunk is one
// cache miss instead of two for every cold read, and for the wipe when
// the key is destroyed, which is what a mass reap spends most of its time
// on; and Go's collector neither scans nor even marks it, where a million
// user keys' payloads in the heap would be tens of megabytes that each
// collection scans (BenchmarkMillionKeys). The only pointer in the
// payload, Data's, is into the chunk itself. Writing a pointer into Go's
// heap into such a payload would hide it from the collector, which is why
// Extra must stay nil: a type with state of its own uses newPayloadExtra.
// Where the arena has no room (or the system no arena), the chunk is a
// pointer-free allocation of Go's heap instead, which the collector marks
// but does not scan.
func newPayload(data []byte) *Payload {
	mem := secmem.Alloc(int(payloadHeader) + len(data))
	p := (*Payload)(unsafe.Pointer(&mem[0]))
	p.Data = mem[payloadHeader:]
	secmem.Copy(p.Data, data) // through no vector register a signal could write out
	return p
}

// NewPayload returns a payload holding a copy of data, in memory that is
// never swapped or dumped and is wiped when the payload's key is done
// with it: what a type's Preparse returns for a payload that is its bytes
// alone. A payload with state of its own is made by [NewPayloadExtra], or
// is a [Payload] literal with Extra set, whose Data, if any, the type
// allocates.
func NewPayload(data []byte) *Payload { return newPayload(data) }

// NewPayloadExtra returns a payload holding extra, the type's state, and
// a copy of data in memory that is never swapped or dumped: for a type
// whose parsed state sits beside secret bytes (an asymmetric key's
// PKCS#8 DER), which are wiped with the payload as [NewPayload]'s are.
func NewPayloadExtra(data []byte, extra any) *Payload { return newPayloadExtra(data, extra) }

// newPayloadExtra returns a payload holding a copy of data and extra,
// made as an ordinary record the collector scans, whose bytes are in
// secmem's arena.
func newPayloadExtra(data []byte, extra any) *Payload {
	p := &Payload{Extra: extra}
	if len(data) > 0 {
		p.Data = secmem.Alloc(len(data))
		secmem.Copy(p.Data, data)
	}
	return p
}

// instantiate gives an allocated key its first payload.
func (s *Service) instantiate(k *Key, p *Payload, charge int) error {
	k.mu.Lock()
	if k.state.Load() != stateUninstantiated {
		k.mu.Unlock()
		return EBUSY
	}
	if charge > 0 && k.has(flagInQuota) {
		if err := s.adjust(k.quota, charge); err != nil {
			k.mu.Unlock()
			return err
		}
		k.quotalen += int32(charge)
	}
	if p != nil {
		k.storePayload(p)
	}
	s.markInstantiated(k)
	k.mu.Unlock()
	s.constructionDone(k)
	notify(k, NotifyInstantiated, 0)
	return nil
}

// update replaces a key's payload; the old one is wiped after a grace
// period, once no reader can hold it.
func (s *Service) update(k *Key, p *Payload, charge int) error {
	k.mu.Lock()
	if k.has(flagRevoked | flagInvalidated | flagDead) {
		k.mu.Unlock()
		return EKEYREVOKED
	}
	old := k.loadPayload()
	delta := charge - payloadCharge(k)
	if k.has(flagInQuota) {
		if err := s.adjust(k.quota, delta); err != nil {
			k.mu.Unlock()
			return err
		}
		k.quotalen += int32(delta)
	}
	k.storePayload(p)
	wasNegative := k.state.Load() != statePositive
	k.state.Store(statePositive)
	if wasNegative {
		k.quota.mu.Lock()
		if k.state.Load() == stateUninstantiated {
			k.quota.nikeys++
		}
		k.quota.mu.Unlock()
	}
	// Updating a user or logon key clears its timeout, as in the kernel.
	k.expiry.Store(0)
	k.mu.Unlock()
	s.retire(k, old)
	notify(k, NotifyUpdated, 0)
	return nil
}

// retire wipes and releases a payload after a grace period.
func (s *Service) retire(k *Key, p *Payload) {
	if p == nil {
		return
	}
	s.retirePayload(p, k.typ.Load().Destroy)
}

// retirePayload wipes p and releases it with destroy (if any) after a grace
// period, or at once if the service is closing.
func (s *Service) retirePayload(p *Payload, destroy func(*Payload)) {
	release := func() { p.release(destroy) }
	s.deferUnlessClosed(func() { s.dom.Call(release) }, release)
}

// Update replaces a key's payload (KEYCTL_UPDATE).
func (c *Caller) Update(id Serial, payload []byte) error {
	return wrap("keyctl_update", id, c.updateKey(id, payload))
}

func (c *Caller) updateKey(id Serial, payload []byte) error {
	if len(payload) > MaxUpdatePayload {
		return EINVAL
	}
	r, err := c.lookupUserKey(id, 0, Write)
	if err != nil {
		return err
	}
	defer r.put()
	t := r.key.typ.Load()
	if !t.Updatable || !t.takesPayloads() {
		return EOPNOTSUPP
	}
	var p *Payload
	var charge int
	if t.Prepare != nil {
		// Made from the payload it replaces, read in a section as a
		// reader reads it. A plain Preparse (a big_key's sealing and
		// file write among them) needs none, and holds no grace period.
		sec := c.s.dom.Read()
		p, charge, err = t.prepareUpdate(c, r.key.description(), r.key.loadPayload(), payload)
		sec.End()
	} else {
		p, charge, err = t.preparseFor(c, payload)
	}
	if err != nil {
		return err
	}
	if err := c.s.update(r.key, p, charge); err != nil {
		p.release(nil)
		return err
	}
	return nil
}
