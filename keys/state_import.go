package keys

import (
	"cmp"
	"io"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Restore is a [Service] being made again from a state stream ([Import]):
// the daemon that takes over gives its callers their keyrings back
// ([Restore.Caller]), then ends the restore ([Restore.Done]).
type Restore struct {
	s *Service
	// byPos is the keys read, in the stream's order: the stream refers
	// to keys by position. They are the new service's only keys: the
	// serial index finds them by serial (key).
	byPos []*Key
	// regPos[i] is byPos[i]'s position in the index's registry, which a
	// keyring's leaves name, as the index gave it to the key.
	regPos []uint32
	// lastType is the type of the last key read (readKey).
	lastType *Type
	done     bool
}

// Import reads a state stream ([Service.Export], of this version or an
// earlier one) into a new [Service] made with opts, and returns it to be
// restored. Every key keeps its serial, owner, permissions, flags, state,
// expiry and payload (a type with an Import hook makes its payload again;
// the others go through Preparse), every keyring its links in listing
// order and its restriction; each owner is charged what its keys cost,
// worked out again. On error nothing is left: the keys read so far are
// wiped and the new service is closed.
func Import(r io.Reader, opts ...Option) (*Restore, error) {
	s := New(opts...)
	rs := &Restore{s: s}
	d := newStateReader(r)
	err := rs.read(d)
	d.wipe()
	if err != nil {
		rs.abort()
		return nil, err
	}
	return rs, nil
}

// Service returns the service being restored.
func (rs *Restore) Service() *Service { return rs.s }

// Key returns the key the stream had under serial id, or nil.
func (rs *Restore) Key(id Serial) *Key {
	if rs.done {
		return nil
	}
	return rs.key(id)
}

// key returns the key read under serial id, or nil.
func (rs *Restore) key(id Serial) *Key {
	if id <= 0 {
		return nil
	}
	return rs.s.index.load(id)
}

// Caller makes a caller from what a daemon handed over of one
// ([Caller.State]): its credentials, and its thread, process and session
// keyrings, which must be keyrings of the stream. An assumed request-key
// authority does not survive a hand-over (its construction has ended),
// and is dropped.
func (rs *Restore) Caller(st CallerState) (*Caller, error) {
	if rs.done {
		return nil, EINVAL
	}
	if st.ReqKeyDefault < ReqKeyDefault || st.ReqKeyDefault > ReqKeyRequestor {
		return nil, EINVAL
	}
	c := rs.s.NewCaller(st.Cred)
	c.jit = reqKeyDest(st.ReqKeyDefault)
	for _, f := range []struct {
		id   Serial
		slot *atomic.Pointer[Key]
	}{{st.Thread, &c.thread}, {st.Process, &c.process}, {st.Session, &c.session}} {
		if f.id == 0 {
			continue
		}
		k := rs.key(f.id)
		if k == nil || !k.isKeyring() {
			c.Release()
			return nil, ENOKEY
		}
		f.slot.Store(k.get())
	}
	return c, nil
}

// Done ends the restore: the keys that nothing refers to (no link, no
// caller, no special keyring) go to the collector, and the collector
// arms its timers for the expiry times the stream held.
func (rs *Restore) Done() {
	if rs.done {
		return
	}
	rs.done = true
	var earliest int64 = math.MaxInt64
	var ks []*Key
	for _, k := range rs.byPos {
		if e := k.expiry.Load(); e != 0 && e < earliest {
			earliest = e
		}
		if k.has(flagInvalidated) {
			earliest = math.MinInt64
		}
		if k.putLast() {
			ks = append(ks, k)
		}
	}
	rs.byPos, rs.regPos = nil, nil
	rs.s.unusedBatch(ks)
	switch {
	case earliest == math.MinInt64:
		rs.s.gcol.requestPass(true)
	case earliest != math.MaxInt64:
		rs.s.gcol.scheduleAt(earliest + int64(rs.s.Tunables().GCDelay))
	}
}

// abort undoes a restore that failed: every payload read is wiped, and
// the service is closed.
func (rs *Restore) abort() {
	for _, k := range rs.byPos {
		if p := k.swapPayload(nil); p != nil {
			p.release(k.typ.Load().Destroy)
		}
	}
	rs.s.Close()
}

func (rs *Restore) read(d *stateReader) error {
	magic := make([]byte, len(stateMagic))
	if _, err := io.ReadFull(d.r, magic); err != nil || string(magic) != stateMagic {
		return corrupt("not a state stream")
	}
	v := d.uvarint(math.MaxUint32, "version")
	if d.err == nil && (v < 1 || v > StateVersion) {
		return ErrStateVersion
	}
	var tv [6]int64
	for i := range tv {
		tv[i] = d.varint("tunables")
	}
	if d.err != nil {
		return d.err
	}
	t := Tunables{GCDelay: time.Duration(tv[0]), MaxKeys: int(tv[1]), MaxBytes: int(tv[2]),
		RootMaxKeys: int(tv[3]), RootMaxBytes: int(tv[4]), PersistentExpiry: time.Duration(tv[5])}
	if err := rs.s.SetTunables(t); err != nil {
		return corrupt("tunables: %v", err)
	}

	hint := d.uvarint(stateMaxKeys, "the number of keys")
	if d.err != nil {
		return d.err
	}
	// This goroutine reads the keys and makes their payloads; another
	// makes the keys and admits them to the service (admitter), so that
	// a restore uses two processors.
	rs.byPos = slices.Grow(rs.byPos, int(min(hint, 1<<20)))
	rs.regPos = slices.Grow(rs.regPos, int(min(hint, 1<<20)))
	a := rs.startAdmitting()
	err := rs.readKeys(d, hint, a)
	if aerr := a.finish(); err == nil {
		err = aerr
	}
	if err != nil {
		return err
	}
	n := uint64(len(rs.byPos))

	nr := d.uvarint(n, "the number of keyrings with links")
	if d.err != nil {
		return d.err
	}
	// This goroutine reads the keyrings' links, another builds their
	// tries (ringBuilder); each keyring gets its links once all are
	// built, in the stream's order.
	bd := rs.startBuilding()
	var rings []*ringJob
	seen := make(map[*Key]struct{})
	for i := uint64(0); i < nr && err == nil; i++ {
		var j *ringJob
		if j, err = rs.readLinks(d, bd, seen); err == nil {
			rings = append(rings, j)
			bd.jobs <- j
		}
	}
	bd.finish()
	if err != nil {
		return err
	}
	for _, j := range rings {
		if err := rs.storeLinks(j); err != nil {
			return err
		}
	}
	if err := rs.checkAcyclic(); err != nil {
		return err
	}

	nres := d.uvarint(n, "the number of restrictions")
	for i := uint64(0); i < nres && d.err == nil; i++ {
		if err := rs.readRestriction(d); err != nil {
			return err
		}
	}

	var specials [4]*Key
	for i := range specials {
		pos := d.uvarint(uint64(len(rs.byPos)), "a special keyring")
		if pos == 0 {
			continue
		}
		k := rs.byPos[pos-1]
		if !k.isKeyring() {
			return corrupt("special keyring %d is not a keyring", k.serial)
		}
		specials[i] = k
	}
	if end := d.str(8, "the end"); d.err == nil && end != "end" {
		return corrupt("no end marker")
	}
	if d.err != nil {
		return d.err
	}
	s := rs.s
	s.specialMu.Lock()
	if specials[0] != nil {
		s.register = specials[0].get()
	}
	if specials[1] != nil {
		s.persist = specials[1].get()
	}
	s.specialMu.Unlock()
	if specials[2] != nil && specials[3] != nil {
		s.trust.once.Do(func() {
			s.trust.builtin, s.trust.secondary = specials[2].get(), specials[3].get()
		})
	}
	return nil
}

// readKeys reads the keys' records up to the serial 0 that ends them,
// makes each one's payload and record, and hands them to a, which makes
// and admits the keys, in the stream's order.
func (rs *Restore) readKeys(d *stateReader, hint uint64, a *admitter) error {
	b := <-a.empty
	defer func() { a.full <- b }() // the last keys, or none
	reserved := uint64(0)
	for i := uint64(0); ; i++ {
		id := d.serial("a serial")
		if d.err != nil {
			return d.err
		}
		if id == 0 {
			return nil // the end of the keys
		}
		if i >= stateMaxKeys {
			return corrupt("more than %d keys", uint64(stateMaxKeys))
		}
		if i == reserved {
			// Size the index ahead by the hint, a million keys at first
			// (each step rehashes the index's keys, in a random order),
			// then sixteenfold at a time: a stream that claims more
			// keys than it holds costs no more than it holds, or a
			// million keys' room (some 40 MB).
			more := min(max(hint, i+1)-i, max(1<<20, 15*i))
			rs.s.index.reserve(int(more))
			reserved = i + more
		}
		mk, err := rs.readKey(d, id)
		if err != nil {
			return err
		}
		b = append(b, mk)
		if len(b) == cap(b) {
			a.full <- b
			if b = <-a.empty; a.failed.Load() {
				return nil // the admitter's error is the restore's
			}
		}
	}
}

// madeKey is a key's record read from the stream, its payload made,
// waiting for the key to be made and admitted to the service (admitKey).
type madeKey struct {
	spec    keySpec
	expiry  int64
	state   keyState
	payload *Payload
	charge  int // what the payload costs its owner, if in quota
}

// release wipes and frees the payload of a key never admitted.
func (mk *madeKey) release() {
	if mk.payload != nil {
		mk.payload.release(mk.spec.typ.Destroy)
		mk.payload = nil
	}
}

// readKey reads one key's record and makes its payload.
func (rs *Restore) readKey(d *stateReader, id Serial) (madeKey, error) {
	s := rs.s
	// The type name, found without a string made for each key: most
	// keys are of the type of the key before.
	var typ string
	var t *Type
	if b := d.bytes(stateMaxString, "a type name"); rs.lastType != nil && string(b) == rs.lastType.Name {
		typ, t = rs.lastType.Name, rs.lastType
	} else {
		typ = string(b)
	}
	desc := d.str(stateMaxString, "a description")
	uid := d.uvarint(math.MaxUint32, "a uid")
	gid := d.uvarint(math.MaxUint32, "a gid")
	perm := d.uvarint(math.MaxUint32, "a permission mask")
	flags := d.uvarint(math.MaxUint32, "flags")
	st := d.varint("a state")
	expiry := d.varint("an expiry time")
	if d.err != nil {
		return madeKey{}, d.err
	}
	if id < 1 {
		return madeKey{}, corrupt("serial %d", id)
	}
	if t == nil {
		t = s.lookupType(typ)
		rs.lastType = t
	}
	if t == nil || t == authType {
		return madeKey{}, corrupt("key %d of type %q, which this daemon does not have", id, typ)
	}
	if uint32(flags)&^exportedFlags != 0 {
		return madeKey{}, corrupt("key %d: flags %#x", id, flags)
	}
	state := keyState(st)
	if st > int64(statePositive) || st < -int64(math.MaxInt16) || (st == int64(stateUninstantiated)) {
		return madeKey{}, corrupt("key %d: state %d", id, st)
	}
	if t == keyringType && state != statePositive {
		return madeKey{}, corrupt("key %d: a keyring that is not instantiated", id)
	}
	mk := madeKey{spec: keySpec{typ: t, desc: desc, uid: uint32(uid), gid: uint32(gid), perm: Perm(perm),
		overrun: uint32(flags)&flagInQuota != 0, flags: uint32(flags) &^ flagInQuota, serial: id,
		// The record here, the key in the admitter: each half of the
		// memory a key takes is faulted in on a processor of its own.
		rec: &keyRec{hash: indexHash(t.Name, desc)}},
		expiry: expiry, state: state}
	if state != statePositive || t == keyringType {
		return mk, nil
	}
	if d.uvarint(1, "whether a payload follows") == 0 {
		if d.err == nil && uint32(flags)&flagRevoked == 0 {
			return madeKey{}, corrupt("key %d: positive, not revoked, and without a payload", id)
		}
		return mk, d.err
	}
	b := d.bytes(stateMaxPayload, "a payload")
	if d.err != nil {
		return madeKey{}, d.err
	}
	var err error
	switch {
	case t.Import != nil:
		mk.payload, mk.charge, err = t.Import(desc, b)
	case t.Preparse != nil:
		mk.payload, mk.charge, err = t.Preparse(b)
	default:
		err = EINVAL
	}
	clear(b)
	if err != nil {
		return madeKey{}, corrupt("key %d (%s %q): its payload: %v", id, typ, desc, err)
	}
	return mk, nil
}

// admitKey makes the key readKey read, charges it to its owner, gives it
// its serial, its state and its payload, and appends it to the keys
// read; on error, the payload is the caller's to release.
func (rs *Restore) admitKey(mk *madeKey) error {
	s, id := rs.s, mk.spec.serial
	k, err := makeKey(mk.spec)
	if err != nil {
		return corrupt("key %d: %v", id, err)
	}
	var pos uint32
	mk.spec.regPos = &pos
	err = s.admit(k, mk.spec)
	if err == EEXIST {
		return corrupt("serial %d twice", id)
	}
	if err != nil {
		return corrupt("key %d: %v", id, err)
	}
	rs.byPos = append(rs.byPos, k)
	rs.regPos = append(rs.regPos, pos)
	k.expiry.Store(mk.expiry)
	if mk.state != statePositive {
		// Negative: instantiated, with the errno it was negated with.
		k.state.Store(mk.state)
		k.quota.mu.Lock()
		k.quota.nikeys++
		k.quota.mu.Unlock()
		return nil
	}
	if mk.payload != nil {
		if mk.spec.overrun {
			s.chargeAnyway(k, mk.charge)
		}
		k.storePayload(mk.payload)
		mk.payload = nil // the key's now
	}
	s.markInstantiated(k)
	return nil
}

// admitter makes and admits the keys that Import reads, in a goroutine
// of its own: reading a key's record and making its payload, and making
// the key (its memory faulted in) and admitting it (its owner's quota,
// the index, whose tables miss the cache at every key) each take about
// half of a restore's time.
// Batches of keys go to it through full, and come back empty, cleared,
// through empty; once it fails, it releases the keys of every batch it
// is sent.
type admitter struct {
	rs          *Restore
	full, empty chan []madeKey
	done        chan struct{}
	failed      atomic.Bool
	err         error // the first error, read after done
}

// admitBatches is how many batches of admitBatch keys an admitter's
// pipeline holds.
const (
	admitBatches = 4
	admitBatch   = 256
)

func (rs *Restore) startAdmitting() *admitter {
	a := &admitter{rs: rs, full: make(chan []madeKey, admitBatches),
		empty: make(chan []madeKey, admitBatches), done: make(chan struct{})}
	for range admitBatches {
		a.empty <- make([]madeKey, 0, admitBatch)
	}
	go a.run()
	return a
}

func (a *admitter) run() {
	defer close(a.done)
	for b := range a.full {
		for i := range b {
			if a.err == nil {
				if a.err = a.rs.admitKey(&b[i]); a.err != nil {
					a.failed.Store(true)
				}
			}
			if a.err != nil {
				b[i].release()
			}
		}
		clear(b)
		a.empty <- b[:0]
	}
}

// finish waits for the keys sent to be admitted, and returns the first
// error.
func (a *admitter) finish() error {
	close(a.full)
	<-a.done
	return a.err
}

// chargeAnyway adds n bytes to what k costs its owner, over the quota if
// need be: what the daemon held, the daemon taking over holds.
func (s *Service) chargeAnyway(k *Key, n int) {
	k.quota.mu.Lock()
	k.quota.qnbyte += n
	k.quota.mu.Unlock()
	s.share.charge(0, n, true)
	k.quotalen += int32(n)
}

// ringJob is one keyring's links, read (readLinks), its trie built
// (ringBuilder), to be stored (storeLinks).
type ringJob struct {
	ring *Key
	snap *ringSnap
	es   []trieEntry // the trie's entries, until it is built
	ks   []*Key      // the keys linked, in the stream's order
	dup  *leaf       // a link to a key of the type and description of another
}

// readLinks reads one keyring's links, which seen (the keyrings read so
// far) must not hold.
func (rs *Restore) readLinks(d *stateReader, bd *ringBuilder, seen map[*Key]struct{}) (*ringJob, error) {
	last := uint64(len(rs.byPos) - 1)
	ring := rs.keyAt(d, "a keyring")
	next := d.uvarint(math.MaxInt64, "a keyring's next slot")
	n := d.uvarint(last+1, "the number of links")
	if d.err != nil {
		return nil, d.err
	}
	ringID := ring.serial
	if !ring.isKeyring() {
		return nil, corrupt("links of %d, which is not a keyring", ringID)
	}
	if _, twice := seen[ring]; twice {
		return nil, corrupt("keyring %d's links twice", ringID)
	}
	seen[ring] = struct{}{}
	snap := &ringSnap{ix: &rs.s.index, next: next}
	// The leaves in one allocation (pointer-free, as each would be), and
	// the trie built at once from them (hbuild).
	leaves := make([]leaf, n)
	es := bd.entries()
	ks := make([]*Key, 0, n)
	for i := uint64(0); i < n; i++ {
		pos := rs.posAt(d, "a linked key")
		slot := d.uvarint(math.MaxInt64, "a slot")
		if d.err != nil {
			bd.recycle(es)
			return nil, d.err
		}
		k := rs.byPos[pos]
		if k == ring {
			bd.recycle(es)
			return nil, corrupt("keyring %d links itself", ringID)
		}
		if slot < 16 {
			if snap.used&(1<<slot) != 0 {
				bd.recycle(es)
				return nil, corrupt("keyring %d: slot %d twice", ringID, slot)
			}
			snap.used |= 1 << slot
		} else if slot >= snap.next {
			snap.next = slot + 1
		}
		leaves[i] = leaf{pos: rs.regPos[pos], serial: k.serial, slot: slot}
		es = append(es, newTrieEntry(k.hash, &leaves[i]))
		ks = append(ks, k)
		if k.isKeyring() {
			snap.nested = append(snap.nested, link{key: k, slot: slot})
		}
	}
	snap.n = int(n)
	slices.SortFunc(snap.nested, func(a, b link) int { return cmp.Compare(a.slot, b.slot) })
	return &ringJob{ring: ring, snap: snap, es: es, ks: ks}, nil
}

// storeLinks gives a keyring the links readLinks read and ringBuilder
// built.
func (rs *Restore) storeLinks(j *ringJob) error {
	if j.dup != nil {
		return corrupt("keyring %d links two keys of one type and description", j.ring.serial)
	}
	if j.ring.has(flagInQuota) {
		rs.s.chargeAnyway(j.ring, linkCost*j.snap.n)
	}
	j.ring.storeRing(j.snap)
	for _, k := range j.ks {
		k.get()
		k.addParent(j.ring)
	}
	j.ks = nil
	return nil
}

// ringBuilder builds the tries of the keyrings that Import reads, in a
// goroutine of its own (hbuild: a tenth of a restore's time, which
// reading the links of the next keyring overlaps). The buffers of
// entries go round between the two.
type ringBuilder struct {
	jobs chan *ringJob
	pool chan []trieEntry
	done chan struct{}
}

// ringBuffers is how many buffers of entries a ringBuilder's pipeline
// holds.
const ringBuffers = 3

func (rs *Restore) startBuilding() *ringBuilder {
	bd := &ringBuilder{jobs: make(chan *ringJob, ringBuffers), pool: make(chan []trieEntry, ringBuffers),
		done: make(chan struct{})}
	for range ringBuffers {
		bd.pool <- nil
	}
	go func() {
		defer close(bd.done)
		for j := range bd.jobs {
			j.snap.root, j.dup = hbuild(j.snap.ix, j.es)
			bd.recycle(j.es)
			j.es = nil
		}
	}()
	return bd
}

// entries returns an empty buffer of entries, once one is free.
func (bd *ringBuilder) entries() []trieEntry { return <-bd.pool }

// recycle gives a buffer of entries back.
func (bd *ringBuilder) recycle(es []trieEntry) {
	clear(es)
	bd.pool <- es[:0]
}

// finish waits for the tries of the keyrings sent to be built.
func (bd *ringBuilder) finish() {
	close(bd.jobs)
	<-bd.done
}

// keyAt reads a position in the stream's keys and returns the key
// there; on error, the reader holds it and the key returned is a
// placeholder nobody must keep.
func (rs *Restore) keyAt(d *stateReader, what string) *Key {
	pos := rs.posAt(d, what)
	if d.err != nil {
		return &Key{keyRec: new(keyRec)}
	}
	return rs.byPos[pos]
}

// posAt reads a position in the stream's keys; on error, the reader
// holds it.
func (rs *Restore) posAt(d *stateReader, what string) uint64 {
	if len(rs.byPos) == 0 {
		d.fail(corrupt("%s, but the stream has no keys", what))
		return 0
	}
	return d.uvarint(uint64(len(rs.byPos)-1), what)
}

// checkAcyclic refuses keyrings that link each other in a loop, which
// every search would walk forever: the kernel never lets one be made.
func (rs *Restore) checkAcyclic() error {
	const (
		unseen = iota
		onPath
		finished
	)
	color := make(map[*Key]uint8)
	type frame struct {
		k *Key
		i int
	}
	for _, root := range rs.byPos {
		if !root.isKeyring() || color[root] != unseen {
			continue
		}
		stack := []frame{{k: root}}
		color[root] = onPath
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			nested := top.k.loadRing().nested
			if top.i == len(nested) {
				color[top.k] = finished
				stack = stack[:len(stack)-1]
				continue
			}
			next := nested[top.i].key
			top.i++
			switch color[next] {
			case onPath:
				return corrupt("keyrings %d and %d link each other in a loop", top.k.serial, next.serial)
			case unseen:
				color[next] = onPath
				stack = append(stack, frame{k: next})
			}
		}
	}
	return nil
}

// readRestriction reads one keyring's restriction and parses it again.
func (rs *Restore) readRestriction(d *stateReader) error {
	ring := rs.keyAt(d, "a restricted keyring")
	kind := d.uvarint(1, "a restriction's kind")
	var typ, spec string
	if kind == 1 {
		typ = d.str(stateMaxString, "a restriction's type")
		spec = d.str(MaxCalloutInfo, "a restriction")
	}
	if d.err != nil {
		return d.err
	}
	id := ring.serial
	if !ring.isKeyring() {
		return corrupt("a restriction of %d, which is not a keyring", id)
	}
	if ring.restriction() != nil {
		return corrupt("keyring %d restricted twice", id)
	}
	res := rejectAll
	if kind == 1 {
		t := rs.s.lookupType(typ)
		if t == nil || t.LookupRestriction == nil {
			return corrupt("keyring %d: a restriction of type %q", id, typ)
		}
		var err error
		if res, err = rs.s.lookupRestriction(t, spec); err != nil {
			return corrupt("keyring %d: restriction %q: %v", id, spec, err)
		}
	}
	if restrictionCycle(ring, res) {
		res.release()
		return corrupt("keyring %d: restrictions in a loop", id)
	}
	ring.extra().restrict.Store(res)
	return nil
}
