package keys

// errAgain is the kernel's EAGAIN from a search: nothing found, nothing
// to report. Operations turn it into ENOKEY or "not possessed".
var errAgain error = EAGAIN

// search describes one search of a keyring tree, the kernel's
// keyring_search_context.
type search struct {
	cred *Cred
	typ  string
	desc string
	// target, if set, makes the search an identity match for that key
	// (possession tests).
	target      *Key
	stateCheck  bool // skip revoked, expired and negative keys, recording why
	skipExpired bool // …without recording expiry (request_key)
	checkPerm   bool // candidates and nested keyrings need Search
	recurse     bool
	// now is the time for the state checks; possession tests, which make
	// none, leave it 0 (see clock).
	now int64
	// match, if set, replaces the description match: every key of the
	// type whose payload it accepts is a candidate (Type.MatchPreparse),
	// looked for by iterating each keyring as the kernel's
	// KEYRING_SEARCH_LOOKUP_ITERATE does.
	match func(p *Payload) bool
	// result is the last recorded reason for skipping a candidate.
	result error
	// hash is indexHash(typ, desc), computed once per search.
	hash   uint64
	hashed bool
}

// find looks the sought type and description up in one keyring version.
func (sc *search) find(snap *ringSnap) (link, bool) {
	if snap == nil || snap.n == 0 {
		return link{}, false
	}
	if !sc.hashed {
		sc.hash, sc.hashed = indexHash(sc.typ, sc.desc), true
	}
	return snap.findHash(sc.hash, sc.typ, sc.desc)
}

// clock returns sc.now, reading the service's clock if the search was
// started without it.
func (sc *search) clock(s *Service) int64 {
	if sc.now == 0 {
		sc.now = s.now()
	}
	return sc.now
}

// candidate applies the kernel's filter to a key whose type and
// description match: it returns true when k is the answer, and records
// why it was skipped otherwise.
func (sc *search) candidate(k *Key, possessed bool) bool {
	if sc.target != nil && k != sc.target {
		return false
	}
	if sc.stateCheck {
		f := k.flags.Load()
		if f&(flagRevoked|flagInvalidated) != 0 {
			sc.result = EKEYREVOKED
			return false
		}
		if k.expired(sc.now) {
			if !sc.skipExpired {
				sc.result = EKEYEXPIRED
			}
			return false
		}
	}
	if sc.checkPerm && !permitted(k, sc.cred, possessed, Search) {
		sc.result = EACCES
		return false
	}
	if sc.stateCheck {
		if err := k.negativeErr(); err != nil {
			sc.result = err
			return false
		}
	}
	return true
}

// tree searches root and, if recursing, the keyrings nested in it, depth
// first: each keyring's own matching entry before its nested keyrings.
// possessed applies to everything reached (possession flows down from the
// root). It returns errAgain when nothing was found and nothing recorded.
// Callers must be in an rcu read section (or on an online task).
func (sc *search) tree(root *Key, possessed bool) (*Key, error) {
	if !root.isKeyring() {
		return nil, ENOTDIR
	}
	if sc.checkPerm && !permitted(root, sc.cred, possessed, Search) {
		return nil, EACCES
	}
	sc.result = nil
	// The root itself may be what is sought.
	if sc.match == nil && root.typeName() == sc.typ && root.description() == sc.desc {
		if sc.candidate(root, possessed) {
			return root, nil
		}
		if sc.result != nil {
			return nil, sc.result
		}
	}
	if k := sc.walk(root, possessed, 0); k != nil {
		return k, nil
	}
	if sc.result != nil {
		return nil, sc.result
	}
	return nil, errAgain
}

// iterate offers each key of the sought type in snap whose payload the
// search's matcher accepts to candidate, in listing order.
func (sc *search) iterate(snap *ringSnap, possessed bool) *Key {
	for _, l := range snap.links() {
		k := l.key
		if k.typeName() != sc.typ {
			continue
		}
		p := k.loadPayload()
		if p == nil || !sc.match(p) {
			continue
		}
		if sc.candidate(k, possessed) {
			return k
		}
	}
	return nil
}

func (sc *search) walk(ring *Key, possessed bool, depth int) *Key {
	if ring.has(flagRevoked | flagInvalidated) {
		return nil
	}
	snap := ring.loadRing()
	if snap == nil {
		return nil
	}
	if sc.match != nil {
		if k := sc.iterate(snap, possessed); k != nil {
			return k
		}
	} else if l, ok := sc.find(snap); ok && sc.candidate(l.key, possessed) {
		return l.key
	}
	if !sc.recurse || depth >= MaxDepth {
		return nil
	}
	for _, l := range snap.nested {
		if sc.checkPerm && !permitted(l.key, sc.cred, possessed, Search) {
			continue
		}
		if k := sc.walk(l.key, possessed, depth+1); k != nil {
			return k
		}
	}
	return nil
}

// searchCred searches a caller's thread, process and session keyrings (or
// the user-session keyring if it has no session), each as a possessed
// root, combining their errors as the kernel's search_cred_keyrings_rcu
// does: "nothing" or a negated key anywhere hides harder errors found
// elsewhere.
func (c *Caller) searchCred(sc *search) (*Key, error) {
	var soft error // EAGAIN or ENOKEY
	hard := errAgain
	thread, process, session := c.keyrings()
	roots := [3]*Key{thread, process, session} // an array: no allocation
	if session == nil {
		roots[2] = c.s.existingUserKeyring(c.cr().UID, true)
	}
	for i, root := range roots {
		if root == nil {
			continue
		}
		k, err := sc.tree(root, true)
		switch {
		case err == nil:
			return k, nil
		case err == errAgain:
			if i == 0 || soft == nil {
				soft = errAgain
			}
		case err == ENOKEY:
			soft = ENOKEY
		default:
			hard = err
		}
	}
	if soft != nil {
		return nil, soft
	}
	return nil, hard
}

// searchProcess is the kernel's search_process_keyrings_rcu: the caller's
// own keyrings, then, for a helper holding a request-key authorisation,
// the requestor's.
func (c *Caller) searchProcess(sc *search) (*Key, error) {
	k, err := c.searchCred(sc)
	if err == nil {
		return k, nil
	}
	ret := error(EACCES)
	if auth := c.assumed(); auth != nil && sc.typ != authType.Name && auth.validate(sc.clock(c.s)) == nil && auth.authRec() != nil {
		// The requestor's keyrings are searched with the requestor's
		// credentials, as the kernel switches ctx->cred to rka->cred.
		req := auth.authRec().requestor
		own := sc.cred
		sc.cred = req.cr()
		k, r := req.searchCred(sc)
		sc.cred = own
		if r == nil {
			return k, nil
		}
		ret = r
	}
	switch {
	case err == ENOKEY || ret == ENOKEY:
		return nil, ENOKEY
	case err == EACCES:
		return nil, ret
	}
	return nil, err
}

// possesses reports whether k is reachable from the caller's keyrings
// (or, for a request-key helper, its requestor's): the kernel's test for
// the possessor permission bits. It makes no state checks, so it reads
// the clock only to validate an assumed authorisation.
func (c *Caller) possesses(k *Key) bool {
	sec := c.s.dom.Read()
	p := c.possessesIn(k)
	sec.End()
	return p
}

// possessesIn is possesses for a caller already in an rcu read section.
func (c *Caller) possessesIn(k *Key) bool {
	t := k.typ.Load()
	sc := search{
		cred:      c.cr(),
		typ:       t.Name,
		desc:      k.description(),
		target:    k,
		checkPerm: true,
		recurse:   true,
	}
	if t != deadType {
		sc.hash, sc.hashed = k.hash, true
	}
	found, _ := c.searchProcess(&sc)
	return found == k
}

// Search looks for a key of type typ and description desc in the tree
// under the keyring ringID (KEYCTL_SEARCH), depth first, and links what it
// finds into dest unless dest is 0.
func (c *Caller) Search(ringID Serial, typ, desc string, dest Serial) (Serial, error) {
	id, err := c.searchKey(ringID, typ, desc, dest)
	return id, wrap("keyctl_search", ringID, err)
}

func (c *Caller) searchKey(ringID Serial, typ, desc string, destID Serial) (Serial, error) {
	if err := checkTypeName(typ); err != nil {
		return 0, err
	}
	if err := checkDesc(desc); err != nil {
		return 0, err
	}
	ring, err := c.lookupUserKey(ringID, 0, Search)
	if err != nil {
		return 0, err
	}
	defer ring.put()
	var dest ref
	if destID != 0 {
		if dest, err = c.lookupUserKey(destID, lookupCreate, Write); err != nil {
			return 0, err
		}
		defer dest.put()
	}
	t := c.s.lookupType(typ)
	if t == nil {
		return 0, ENOKEY
	}
	if !ring.key.isKeyring() {
		return 0, ENOTDIR
	}
	sc := &search{cred: c.cr(), typ: typ, desc: desc, stateCheck: true, checkPerm: true, recurse: true, now: c.s.now()}
	if t.MatchPreparse != nil {
		if sc.match, err = t.MatchPreparse(desc); err != nil {
			return 0, err
		}
	}
	sec := c.s.dom.Read()
	k, err := sc.tree(ring.key, ring.possessed)
	if err == nil && !k.tryGet() {
		err = ENOKEY
	}
	sec.End()
	if err == errAgain {
		return 0, ENOKEY
	}
	if err != nil {
		return 0, err
	}
	if dest.key != nil {
		if !permitted(k, c.cr(), ring.possessed, Link) {
			k.put()
			return 0, EACCES
		}
		if err := c.s.linkInto(dest.key, k.get(), true); err != nil {
			k.put()
			k.put()
			return 0, err
		}
	}
	k.put()
	return k.serial, nil
}

// SearchKeyring finds a key of type typ whose payload match accepts in ring
// or the keyrings it links, as a possessor, with no permission checked and
// revoked, expired and negative keys skipped: the kernel's keyring_search
// with KEYRING_SEARCH_NO_CHECK_PERM, for a type's code that looks for a key
// its own way (a restriction's signer). The caller must be in a read section
// of the [Service]'s [Service.Domain]; the key is not referenced. It fails
// with [ENOKEY] if none is found.
func (s *Service) SearchKeyring(ring *Key, typ string, match func(p *Payload) bool) (*Key, error) {
	sc := &search{typ: typ, stateCheck: true, recurse: true, now: s.now(), match: match}
	k, err := sc.tree(ring, true)
	if err != nil {
		return nil, ENOKEY
	}
	return k, nil
}
