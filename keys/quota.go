package keys

import (
	"sync"
	"sync/atomic"
)

// quotaUser is the kernel's key_user: one per owner uid, counting that
// owner's keys and the bytes charged to it.
type quotaUser struct {
	uid uint32
	// s is the service the record counts for: a key reaches its service
	// through its owner's record (Key.quota), so that a million keys do
	// not each hold a pointer to the one service.
	s  *Service
	mu sync.Mutex
	// refs counts keys owned plus callers whose credentials name the uid;
	// the record goes away at zero. It is atomic so that allocation and
	// destruction, which take and drop one each, share only a read lock
	// of the register (the collector destroys while callers add).
	refs   atomic.Int64
	nkeys  int // keys owned
	nikeys int // of which instantiated
	qnkeys int // keys counted against the quota
	qnbyte int // bytes counted against the quota
}

func (s *Service) quotaFor(uid uint32) *quotaUser {
	s.usersMu.RLock()
	u := s.users[uid]
	if u != nil && u.tryRef() {
		s.usersMu.RUnlock()
		return u
	}
	s.usersMu.RUnlock()
	s.usersMu.Lock()
	defer s.usersMu.Unlock()
	u = s.users[uid]
	if u == nil {
		u = &quotaUser{uid: uid, s: s}
		s.users[uid] = u
	}
	// Under the write lock a record at zero is revived, not replaced:
	// quotaPut removes it only if it is still at zero then.
	u.refs.Add(1)
	return u
}

// tryRef takes a reference unless the record is at zero (on its way out
// of the register; only quotaFor's locked path may revive it).
func (u *quotaUser) tryRef() bool {
	for {
		n := u.refs.Load()
		if n <= 0 {
			return false
		}
		if u.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Service) quotaPut(u *quotaUser) {
	if u.refs.Add(-1) != 0 {
		return
	}
	s.usersMu.Lock()
	if u.refs.Load() == 0 && s.users[u.uid] == u {
		delete(s.users, u.uid)
	}
	s.usersMu.Unlock()
}

func (s *Service) limits(uid uint32) (maxKeys, maxBytes int) {
	t := s.Tunables()
	if uid == 0 {
		return t.RootMaxKeys, t.RootMaxBytes
	}
	return t.MaxKeys, t.MaxBytes
}

// charge counts a new key of quotalen bytes against u. With overrun the
// charge is recorded but never refused (the kernel's QUOTA_OVERRUN).
func (s *Service) charge(u *quotaUser, quotalen int, overrun bool) error {
	maxKeys, maxBytes := s.limits(u.uid)
	u.mu.Lock()
	defer u.mu.Unlock()
	if !overrun && (u.qnkeys+1 > maxKeys || u.qnbyte+quotalen > maxBytes) {
		return EDQUOT
	}
	if !s.share.charge(1, quotalen, overrun) {
		return EDQUOT
	}
	u.qnkeys++
	u.qnbyte += quotalen
	return nil
}

// adjust changes the bytes charged by delta; only increases can fail.
func (s *Service) adjust(u *quotaUser, delta int) error {
	_, maxBytes := s.limits(u.uid)
	u.mu.Lock()
	defer u.mu.Unlock()
	if delta > 0 && u.qnbyte+delta > maxBytes {
		return EDQUOT
	}
	if !s.share.charge(0, delta, false) {
		return EDQUOT
	}
	u.qnbyte += delta
	return nil
}

// uncharge returns a key's whole charge.
func (s *Service) uncharge(u *quotaUser, quotalen int) {
	u.mu.Lock()
	u.qnkeys--
	u.qnbyte -= quotalen
	u.mu.Unlock()
	s.share.charge(-1, -quotalen, true)
}

// quotaReturn is what destroying keys gives back to one owner.
type quotaReturn struct {
	u                     *quotaUser
	keys, ikeys           int // keys owned, instantiated
	quotaKeys, quotaBytes int // counted against the quota
}

// quotaReturns gathers the quota of a batch of destroyed keys by owner,
// so that the collector takes each owner's lock once per batch instead of
// twice per key: add_key takes the same lock to charge new keys, and a
// mass reap would otherwise contend with it a thousand times per chunk.
// A chunk's keys have few owners, so a slice searched linearly will do.
type quotaReturns []quotaReturn

func (r *quotaReturns) add(u *quotaUser, inQuota bool, quotalen int, instantiated bool) {
	i := len(*r) - 1
	for ; i >= 0 && (*r)[i].u != u; i-- {
	}
	if i < 0 {
		*r = append(*r, quotaReturn{u: u})
		i = len(*r) - 1
	}
	e := &(*r)[i]
	e.keys++
	if instantiated {
		e.ikeys++
	}
	if inQuota {
		e.quotaKeys++
		e.quotaBytes += quotalen
	}
}

// returnQuota gives back what r gathered, and drops the destroyed keys'
// references to their owners' records.
func (s *Service) returnQuota(r quotaReturns) {
	for _, e := range r {
		u := e.u
		u.mu.Lock()
		u.nkeys -= e.keys
		u.nikeys -= e.ikeys
		u.qnkeys -= e.quotaKeys
		u.qnbyte -= e.quotaBytes
		u.mu.Unlock()
		s.share.charge(-e.quotaKeys, -e.quotaBytes, true)
		if u.refs.Add(-int64(e.keys-1)) <= 0 {
			panic("keys: quota record released while keys it counts remain")
		}
		s.quotaPut(u) // the last of the batch's references
	}
}
