package keys

import "fmt"

// Check verifies the invariants that every sequence of operations must
// keep, and returns the first one broken:
//
//   - the serial index holds exactly [Service.Keys]() keys, each with a
//     reference;
//   - each user's quota record counts exactly the keys and bytes of the
//     live keys it owns (quota used equals the sum over live keys);
//   - no keyring links a key that has been destroyed or left the index;
//   - no keyring reaches itself through the keyrings a search descends
//     into (links out of revoked or invalidated keyrings are not
//     followed, as the cycle check does not follow them).
//
// Its answer is exact only on a quiet service: no operation in flight and
// [Service.WaitGC] returned. Soak and fault tests call it after their load
// stops; it walks every key, so it is not for a busy daemon's hot path.
func (s *Service) Check() error {
	idx := map[Serial]*Key{}
	for k := range s.index.all() {
		idx[k.serial] = k
	}
	if got := s.Keys(); got != len(idx) {
		return fmt.Errorf("keys: Keys() = %d but the index holds %d", got, len(idx))
	}
	// The keyrings by name are the named keyrings of the index. Check is
	// exact once destructions have run (WaitGC): a keyring out of the
	// index stays listed until it is destroyed.
	s.namesMu.Lock()
	listed := 0
	for name, l := range s.names {
		for _, k := range l {
			listed++
			if k.description() != name || k.typ.Load() != keyringType {
				s.namesMu.Unlock()
				return fmt.Errorf("keys: key %d listed under the keyring name %q", k.serial, name)
			}
			if idx[k.serial] != k {
				s.namesMu.Unlock()
				return fmt.Errorf("keys: keyring %d (%q) listed by name but not indexed", k.serial, name)
			}
		}
	}
	s.namesMu.Unlock()
	named := 0
	for _, k := range idx {
		if k.typ.Load() == keyringType && k.description()[0] != '.' {
			named++
		}
	}
	if named != listed {
		return fmt.Errorf("keys: %d named keyrings indexed, %d listed by name", named, listed)
	}
	type tally struct{ qkeys, qbytes, keys int }
	want := map[uint32]*tally{}
	for id, k := range idx {
		if k.usage.Load() <= 0 {
			return fmt.Errorf("keys: indexed key %d has no reference", id)
		}
		k.mu.Lock()
		u, ql, inQuota := k.quota, int(k.quotalen), k.has(flagInQuota)
		k.mu.Unlock()
		uid := k.uid.Load()
		if u == nil || u.uid != uid {
			return fmt.Errorf("keys: key %d owned by uid %d is charged elsewhere", id, uid)
		}
		t := want[uid]
		if t == nil {
			t = &tally{}
			want[uid] = t
		}
		t.keys++
		if inQuota {
			t.qkeys++
			t.qbytes += ql
		}
	}
	s.usersMu.Lock()
	users := make(map[uint32]*quotaUser, len(s.users))
	for uid, u := range s.users {
		users[uid] = u
	}
	s.usersMu.Unlock()
	for uid, t := range want {
		if users[uid] == nil {
			return fmt.Errorf("keys: uid %d owns %d keys but has no quota record", uid, t.keys)
		}
	}
	for uid, u := range users {
		t := want[uid]
		if t == nil {
			t = &tally{}
		}
		u.mu.Lock()
		qk, qb, nk, refs := u.qnkeys, u.qnbyte, u.nkeys, int(u.refs.Load())
		u.mu.Unlock()
		if qk != t.qkeys || qb != t.qbytes || nk != t.keys {
			return fmt.Errorf("keys: uid %d: quota record %d keys/%d bytes (%d owned); live keys give %d/%d (%d owned)",
				uid, qk, qb, nk, t.qkeys, t.qbytes, t.keys)
		}
		if refs < nk {
			return fmt.Errorf("keys: uid %d: record has %d references for %d keys", uid, refs, nk)
		}
	}
	for id, k := range idx {
		if !k.isKeyring() {
			continue
		}
		for _, l := range k.loadRing().links() {
			if idx[l.key.serial] != l.key || l.key.usage.Load() <= 0 {
				return fmt.Errorf("keys: keyring %d links key %d, which is destroyed", id, l.key.serial)
			}
		}
	}
	return checkCycles(idx)
}

func checkCycles(idx map[Serial]*Key) error {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[*Key]int{}
	var visit func(k *Key) error
	visit = func(k *Key) error {
		state[k] = onPath
		if snap := k.loadRing(); snap != nil && !k.has(flagInvalidated|flagRevoked) {
			for _, l := range snap.nested {
				switch state[l.key] {
				case onPath:
					return fmt.Errorf("keys: keyring cycle through %d and %d", k.serial, l.key.serial)
				case unseen:
					if err := visit(l.key); err != nil {
						return err
					}
				}
			}
		}
		state[k] = done
		return nil
	}
	for _, k := range idx {
		if k.isKeyring() && state[k] == unseen {
			if err := visit(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// Uninstantiated returns the serials of keys that are neither positive
// nor negative: keys under construction. Once every upcall has returned
// (or timed out) there must be none, whatever happened to the processes
// that asked for them or were constructing them.
func (s *Service) Uninstantiated() []Serial {
	var out []Serial
	for k := range s.index.all() {
		if k.state.Load() == stateUninstantiated {
			out = append(out, k.serial)
		}
	}
	return out
}
