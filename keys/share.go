package keys

import (
	"sync"
	"sync/atomic"
)

// A Share bounds what the keys of one [Service] hold together, whoever
// owns them, and, through its parent, what the keys of several Services
// hold: the seccomp agent gives each container's key namespace a Share
// whose parent is one for every container, so that one container (or
// one uid in it) at its bound costs nobody else. Without one, a
// Service is bounded only by its per-uid quotas and the process's
// big_key file bound ([SetBigKeyFileLimit]), which every container's
// namespace would otherwise each have whole.
//
// It counts the keys and bytes charged to quotas (as maxkeys and
// maxbytes count them) and the big_key payload files; a charge that
// any share up the chain cannot take fails ([EDQUOT] for keys and bytes,
// [EMFILE] for files, EDQUOT for one uid's files) and takes nothing.
type Share struct {
	parent *Share
	lim    ShareLimits

	mu       sync.Mutex
	keys     int
	bytes    int
	files    int
	filesOf  map[uint32]int
	detached bool // Detach has given everything back
}

// ShareLimits are a [Share]'s bounds; zero is no bound.
type ShareLimits struct {
	Keys, Bytes int
	// BigKeyFiles bounds the big_key payload files; BigKeyFilesPerUID
	// those added by one uid (the caller's, as the file is made).
	BigKeyFiles, BigKeyFilesPerUID int
}

// NewShare returns a share with limits lim, within parent (nil: none).
func NewShare(parent *Share, lim ShareLimits) *Share {
	return &Share{parent: parent, lim: lim, filesOf: make(map[uint32]int)}
}

// WithShare makes a [Service]'s keys count against sh.
func WithShare(sh *Share) Option { return func(s *Service) { s.share = sh } }

// ShareUsage is what a [Share] holds.
type ShareUsage struct{ Keys, Bytes, BigKeyFiles int }

// Usage returns what sh holds now.
func (sh *Share) Usage() ShareUsage {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return ShareUsage{sh.keys, sh.bytes, sh.files}
}

// charge counts n keys and b bytes (either may be negative) in sh and
// its parents, unless one of them would pass its bound (a decrease, or
// overrun, never does); it reports whether it did. A nil share takes
// everything.
func (sh *Share) charge(n, b int, overrun bool) bool {
	if sh == nil {
		return true
	}
	sh.mu.Lock()
	detached := sh.detached
	sh.mu.Unlock()
	if detached {
		return n <= 0 && b <= 0
	}
	for x := sh; x != nil; x = x.parent {
		x.mu.Lock()
		over := !overrun && (n > 0 && x.lim.Keys > 0 && x.keys+n > x.lim.Keys ||
			b > 0 && x.lim.Bytes > 0 && x.bytes+b > x.lim.Bytes)
		if !over {
			x.keys += n
			x.bytes += b
		}
		x.mu.Unlock()
		if over {
			for y := sh; y != x; y = y.parent {
				y.mu.Lock()
				y.keys -= n
				y.bytes -= b
				y.mu.Unlock()
			}
			return false
		}
	}
	return true
}

// takeFile counts a big_key file made for uid in sh and its parents,
// or says which bound it would pass: EDQUOT for uid's, EMFILE for a
// share's. A nil share takes it.
func (sh *Share) takeFile(uid uint32) Errno {
	for x := sh; x != nil; x = x.parent {
		x.mu.Lock()
		var e Errno
		switch {
		case x.lim.BigKeyFilesPerUID > 0 && x.filesOf[uid] >= x.lim.BigKeyFilesPerUID:
			e = EDQUOT
		case x.lim.BigKeyFiles > 0 && x.files >= x.lim.BigKeyFiles:
			e = EMFILE
		default:
			x.files++
			x.filesOf[uid]++
		}
		x.mu.Unlock()
		if e != 0 {
			for y := sh; y != x; y = y.parent {
				y.giveFileOne(uid)
			}
			return e
		}
	}
	return 0
}

// giveFile undoes takeFile. It reports whether the process's count of
// files is the caller's to decrement: not once sh is detached, which
// has done it.
func (sh *Share) giveFile(uid uint32) bool {
	if sh == nil {
		return true
	}
	sh.mu.Lock()
	detached := sh.detached
	sh.mu.Unlock()
	if detached {
		return false
	}
	for x := sh; x != nil; x = x.parent {
		x.giveFileOne(uid)
	}
	return true
}

// Detach gives back to sh's parents (and to the process's bound on
// big_key files) everything sh still holds, for a [Service] closed with
// keys in it: Close wipes their payloads but destroys no key (a
// container's user and persistent keyrings outlive its processes), and
// their charges would otherwise stay with the parents for good. The service must be closed; what its
// keys still hold is counted nowhere once it is detached.
func (sh *Share) Detach() {
	sh.mu.Lock()
	if sh.detached {
		sh.mu.Unlock()
		return
	}
	sh.detached = true
	n, b, files, of := sh.keys, sh.bytes, sh.files, sh.filesOf
	sh.keys, sh.bytes, sh.files, sh.filesOf = 0, 0, 0, make(map[uint32]int)
	sh.mu.Unlock()
	for x := sh.parent; x != nil; x = x.parent {
		x.mu.Lock()
		x.keys -= n
		x.bytes -= b
		x.files -= files
		for uid, k := range of {
			if x.filesOf[uid] -= k; x.filesOf[uid] <= 0 {
				delete(x.filesOf, uid)
			}
		}
		x.mu.Unlock()
	}
	payloadFiles.open.Add(-int64(files))
}

func (sh *Share) giveFileOne(uid uint32) {
	sh.mu.Lock()
	sh.files--
	if sh.filesOf[uid]--; sh.filesOf[uid] <= 0 {
		delete(sh.filesOf, uid)
	}
	sh.mu.Unlock()
}

// payloadFiles counts the payload files open in this process (a
// big_key's), each of which holds a descriptor, against a limit (0:
// none). Descriptors belong to the process, not to one Service, so the
// count does too: a daemon whose every user may add big keys must not
// let them fill its descriptor table, where accept, pidfds and logs need
// room.
var payloadFiles struct {
	open, limit atomic.Int64
}

// SetBigKeyFileLimit bounds how many payload files (a big_key's, above
// its inline size) this process keeps at once (n <= 0: no bound) and
// returns the previous bound. Adding or updating a key whose payload
// would need one more file fails with [EMFILE] ([Account.TakeFile]).
// (Each non-root uid is bounded already by its key quota, maxkeys.)
func SetBigKeyFileLimit(n int) int {
	return int(payloadFiles.limit.Swap(int64(max(n, 0))))
}

// BigKeyFiles returns how many payload files are open.
func BigKeyFiles() int { return int(payloadFiles.open.Load()) }

// takeProcessFile counts one more file, unless the limit is reached.
func takeProcessFile() bool {
	for {
		n, lim := payloadFiles.open.Load(), payloadFiles.limit.Load()
		if lim > 0 && n >= lim {
			return false
		}
		if payloadFiles.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// An Account is whom a key type charges what a payload holds outside the
// heap ([Type.PreparseFor]): the uid that adds the key, within its
// [Service]'s [Share], and always the process's bound
// ([SetBigKeyFileLimit]). The zero Account charges the process's bound
// alone.
type Account struct {
	share *Share
	uid   uint32
}

// TakeFile counts one payload file, or fails with the bound it would
// pass: [EDQUOT] for the uid's in a share, [EMFILE] for a share's or the
// process's. A file taken is given back with [Account.GiveFile] once closed.
func (a Account) TakeFile() error {
	// The share first: a tenant at its own bound never takes, even for
	// a moment, one of the process's files that another could use.
	if e := a.share.takeFile(a.uid); e != 0 {
		return e
	}
	if !takeProcessFile() {
		a.share.giveFile(a.uid)
		return EMFILE
	}
	return nil
}

// GiveFile gives back a file [Account.TakeFile] counted, once it is closed.
func (a Account) GiveFile() {
	if a.share.giveFile(a.uid) {
		payloadFiles.open.Add(-1)
	}
}
