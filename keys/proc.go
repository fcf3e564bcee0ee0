package keys

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ProcKeys renders the keys the caller may view in the format of the
// kernel's /proc/keys, in ascending serial order. Possession is tested
// only for keys whose possessor bits grant [View], as the kernel does.
func (c *Caller) ProcKeys() string { return c.procKeys(c.cr()) }

// ProcKeysAs is [Caller.ProcKeys] for a reader with credentials cred and c's
// keyrings: a process reading /proc/keys is checked with the
// credentials it has at the moment (the kernel's file's f_cred), which
// may be newer than those its last key call left on c.
func (c *Caller) ProcKeysAs(cred Cred) string { return c.procKeys(&cred) }

func (c *Caller) procKeys(cr *Cred) string {
	var b strings.Builder
	for _, k := range c.s.sortedKeys() {
		if !k.tryGet() {
			continue
		}
		perm := Perm(k.perm.Load())
		possessed := false
		if perm&(View<<PossessorShift) != 0 {
			possessed = c.possesses(k)
		}
		if permitted(k, cr, possessed, View) {
			c.s.procLine(&b, k, 1)
		}
		k.put()
	}
	return b.String()
}

// sortedKeys returns every key in serial order. The index keeps no
// order (nothing else needs one), so a view sorts what it collected.
func (s *Service) sortedKeys() []*Key {
	out, _ := s.index.scan(&indexCursor{}, math.MaxInt, make([]*Key, 0, s.Keys()))
	slices.SortFunc(out, func(a, b *Key) int { return cmp.Compare(a.serial, b.serial) })
	return slices.Compact(out) // a shard rebuilt meanwhile is scanned twice
}

// procTimeout renders the expiry column.
func procTimeout(expiry, now int64) string {
	if expiry == 0 {
		return "perm"
	}
	if now >= expiry {
		return "expd"
	}
	t := int64(time.Duration(expiry-now) / time.Second)
	switch {
	case t < 60:
		return fmt.Sprintf("%ds", t)
	case t < 3600:
		return fmt.Sprintf("%dm", t/60)
	case t < 86400:
		return fmt.Sprintf("%dh", t/3600)
	case t < 604800:
		return fmt.Sprintf("%dd", t/86400)
	}
	return fmt.Sprintf("%dw", t/604800)
}

func flagChar(on bool, c byte) byte {
	if on {
		return c
	}
	return '-'
}

// procLine writes k's line; held is how many references the reader
// itself holds, left out of the usage column.
func (s *Service) procLine(b *strings.Builder, k *Key, held int32) {
	f := k.flags.Load()
	st := k.state.Load()
	flags := []byte{
		flagChar(st != stateUninstantiated, 'I'),
		flagChar(f&flagRevoked != 0, 'R'),
		flagChar(f&flagDead != 0, 'D'),
		flagChar(f&flagInQuota != 0, 'Q'),
		flagChar(f&flagUserConstruct != 0, 'U'),
		flagChar(st < 0, 'N'),
		flagChar(f&flagInvalidated != 0, 'i'),
	}
	t := k.typ.Load()
	name := t.Name
	if len(name) > 9 {
		name = name[:9]
	}
	// The usage column counts references the way the kernel's does;
	// a key held only by a keyring shows 1.
	fmt.Fprintf(b, "%08x %s %5d %4s %08x %5d %5d %-9.9s ",
		uint32(k.serial), flags, k.usage.Load()-held, procTimeout(k.expiry.Load(), s.now()),
		k.perm.Load(), displayID(k.uid.Load()), displayID(k.gid.Load()), name)
	if t == authType {
		b.WriteString("key:")
	}
	b.WriteString(k.description())
	if st == statePositive && t.Describe != nil {
		sec := s.dom.Read()
		b.WriteString(t.Describe(k, k.loadPayload()))
		sec.End()
	}
	b.WriteByte('\n')
}

// ProcKeyUsers renders the per-user quota records in the format of the
// kernel's /proc/key-users: uid, references, keys/instantiated keys,
// keys/maxkeys, bytes/maxbytes.
func (s *Service) ProcKeyUsers() string {
	var b strings.Builder
	for _, u := range s.QuotaUsers() {
		fmt.Fprintf(&b, "%5d: %5d %d/%d %d/%d %d/%d\n", u.UID, u.Refs, u.Keys, u.InstantiatedKeys,
			u.QuotaKeys, u.MaxKeys, u.QuotaBytes, u.MaxBytes)
	}
	return b.String()
}

// QuotaUse is one owner's quota record, as /proc/key-users shows it.
type QuotaUse struct {
	UID                    uint32
	Refs                   int64 // keys owned plus callers naming the uid
	Keys, InstantiatedKeys int
	// QuotaKeys and QuotaBytes are what counts against the limits
	// MaxKeys and MaxBytes.
	QuotaKeys, QuotaBytes int
	MaxKeys, MaxBytes     int
}

// QuotaUsers returns every owner's quota record, by uid.
func (s *Service) QuotaUsers() []QuotaUse {
	s.usersMu.Lock()
	users := make([]*quotaUser, 0, len(s.users))
	for _, u := range s.users {
		users = append(users, u)
	}
	s.usersMu.Unlock()
	slices.SortFunc(users, func(a, b *quotaUser) int { return cmp.Compare(a.uid, b.uid) })
	out := make([]QuotaUse, 0, len(users))
	for _, u := range users {
		maxKeys, maxBytes := s.limits(u.uid)
		u.mu.Lock()
		out = append(out, QuotaUse{UID: u.uid, Refs: u.refs.Load(), Keys: u.nkeys, InstantiatedKeys: u.nikeys,
			QuotaKeys: u.qnkeys, QuotaBytes: u.qnbyte, MaxKeys: maxKeys, MaxBytes: maxBytes})
		u.mu.Unlock()
	}
	return out
}

// QuotaUsage returns the keys and bytes counted against uid's quota.
func (s *Service) QuotaUsage(uid uint32) (keys, bytes int) {
	s.usersMu.Lock()
	u := s.users[uid]
	s.usersMu.Unlock()
	if u == nil {
		return 0, 0
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.qnkeys, u.qnbyte
}
