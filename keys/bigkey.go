package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// BigKeyInline is the largest big_key payload kept in memory ("buff");
// larger ones are sealed with a per-key key and kept in an unlinked file
// outside the heap ("file"), as the kernel keeps them in shmem.
const BigKeyInline = 1024

// bigKeyCharge is what a big_key costs its owner's byte quota whatever its
// size: the kernel charges the fixed size of its handle.
const bigKeyCharge = 16

// bigKeyFiles counts the big_key payload files open in this process, each
// of which holds a descriptor, against a limit (0: none). Descriptors
// belong to the process, not to one Service, so the count does too: a
// daemon whose every user may add big keys must not let them fill its
// descriptor table, where accept, pidfds and logs need room.
var bigKeyFiles struct {
	open, limit atomic.Int64
}

// SetBigKeyFileLimit bounds how many big_key payloads this process keeps
// in files at once (n <= 0: no bound) and returns the previous bound.
// Adding or updating a big_key whose payload would need one more file
// fails with EMFILE; payloads of up to BigKeyInline bytes need none.
// (Each non-root uid is bounded already by its key quota, maxkeys.)
func SetBigKeyFileLimit(n int) int {
	return int(bigKeyFiles.limit.Swap(int64(max(n, 0))))
}

// BigKeyFiles returns how many big_key payload files are open.
func BigKeyFiles() int { return int(bigKeyFiles.open.Load()) }

// takeBigKeyFile counts one more file, unless the limit is reached.
func takeBigKeyFile() bool {
	for {
		n, lim := bigKeyFiles.open.Load(), bigKeyFiles.limit.Load()
		if lim > 0 && n >= lim {
			return false
		}
		if bigKeyFiles.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// sealed is a big_key payload kept encrypted in an unlinked file.
type sealed struct {
	mu   sync.Mutex
	f    *os.File
	key  [32]byte
	size int
	// share and uid are whom the file is charged to besides the process
	// (Share.takeFile); share may be nil.
	share *Share
	uid   uint32
}

// payloadLen is the sealed plaintext's length (Payload.Len).
func (b *sealed) payloadLen(int) int { return b.size }

// Wipe forgets the key (so the file's contents can never be opened
// again), overwrites and closes the file.
func (b *sealed) Wipe() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.key[:])
	if b.f != nil {
		if st, err := b.f.Stat(); err == nil {
			// Overwritten a chunk at a time from zeros no one writes:
			// a megabyte's key costs no megabyte of garbage to wipe.
			for off := int64(0); off < st.Size(); off += int64(len(zeros)) {
				n := min(int64(len(zeros)), st.Size()-off)
				if _, err := b.f.WriteAt(zeros[:n], off); err != nil {
					break
				}
			}
		}
		_ = b.f.Close()
		b.f = nil
		if b.share.giveFile(b.uid) {
			bigKeyFiles.open.Add(-1)
		}
	}
}

func (b *sealed) open() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.f == nil {
		return nil, EKEYREVOKED
	}
	st, err := b.f.Stat()
	if err != nil {
		return nil, EIO
	}
	box := make([]byte, st.Size())
	if _, err := b.f.ReadAt(box, 0); err != nil {
		return nil, EIO
	}
	aead, err := newAEAD(b.key[:])
	if err != nil {
		return nil, EIO
	}
	ns := aead.NonceSize()
	if len(box) < ns {
		return nil, EIO
	}
	out, err := aead.Open(nil, box[:ns], box[ns:], nil)
	if err != nil {
		return nil, EIO
	}
	return out, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal keeps data in a file charged to the process's bound and to
// share (nil: none) for uid.
func seal(data []byte, share *Share, uid uint32) (*sealed, error) {
	b := &sealed{size: len(data), share: share, uid: uid}
	if _, err := rand.Read(b.key[:]); err != nil {
		return nil, ENOMEM
	}
	aead, err := newAEAD(b.key[:])
	if err != nil {
		return nil, ENOMEM
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, ENOMEM
	}
	// The sealed box goes to the file and is wiped: its buffer is
	// reused from one key to the next instead of a megabyte of garbage
	// a key.
	bp := boxes.Get().(*[]byte)
	box := aead.Seal(append((*bp)[:0], nonce...), nonce, data, nil)
	defer func() {
		clear(box)
		*bp = box[:0]
		boxes.Put(bp)
	}()
	// The share first: a tenant at its own bound never takes, even for
	// a moment, one of the process's files that another could use.
	if e := share.takeFile(uid); e != 0 {
		return nil, e
	}
	if !takeBigKeyFile() {
		share.giveFile(uid)
		return nil, EMFILE
	}
	f, err := os.CreateTemp("", "ukeys-big_key-*")
	if err != nil {
		bigKeyFiles.open.Add(-1)
		share.giveFile(uid)
		return nil, ENOMEM
	}
	_ = os.Remove(f.Name()) // unlinked: reachable only through this handle
	if _, err := f.Write(box); err != nil {
		_ = f.Close()
		bigKeyFiles.open.Add(-1)
		share.giveFile(uid)
		return nil, ENOMEM
	}
	b.f = f
	return b, nil
}

// zeros is what a sealed file is overwritten with; nothing writes it.
var zeros [64 << 10]byte

// boxes holds the buffers sealed boxes are made in (wiped when put back).
var boxes = sync.Pool{New: func() any { return new([]byte) }}

// bigKeyPreparse is big_key's Preparse, its file (if it needs one)
// charged to share for uid.
func bigKeyPreparse(data []byte, share *Share, uid uint32) (*Payload, int, error) {
	if len(data) == 0 || len(data) > MaxBigKeyPayload {
		return nil, 0, EINVAL
	}
	if len(data) <= BigKeyInline {
		return newPayload(data), bigKeyCharge, nil
	}
	b, err := seal(data, share, uid)
	if err != nil {
		return nil, 0, err
	}
	return &Payload{Extra: b}, bigKeyCharge, nil
}

// preparseFor is t's Preparse for caller c: a big_key's file is charged
// to c's service's share (WithShare) for c's uid, besides the process's
// bound.
func (t *Type) preparseFor(c *Caller, data []byte) (*Payload, int, error) {
	if t == bigKeyType && c != nil && c.s.share != nil {
		return bigKeyPreparse(data, c.s.share, c.cr().UID)
	}
	return t.Preparse(data)
}

var bigKeyType = &Type{
	Name: "big_key",
	Preparse: func(data []byte) (*Payload, int, error) {
		return bigKeyPreparse(data, nil, 0)
	},
	MaxSize:   MaxBigKeyPayload,
	Updatable: true,
	Read: func(p *Payload) ([]byte, error) {
		if b, ok := p.Extra.(*sealed); ok {
			return b.open()
		}
		return p.Data, nil
	},
	// A daemon that takes over gets the plaintext, which it seals again
	// in a file of its own with a key of its own.
	Export: func(p *Payload, write func([]byte)) error {
		b, ok := p.Extra.(*sealed)
		if !ok {
			write(p.Data)
			return nil
		}
		data, err := b.open()
		if err != nil {
			return err
		}
		write(data)
		clear(data)
		return nil
	},
	Describe: func(k *Key, p *Payload) string {
		if p == nil {
			return ": 0 [buff]"
		}
		where := "buff"
		if _, ok := p.Extra.(*sealed); ok {
			where = "file"
		}
		return fmt.Sprintf(": %d [%s]", p.Len(), where)
	},
}
