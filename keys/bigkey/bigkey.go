package bigkey

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"os"
	"sync"

	"github.com/ukeys/ukeys/keys"
)

// Inline is the largest big_key payload kept in memory ("buff"); larger
// ones are sealed with a per-key key and kept in an unlinked file outside
// the heap ("file"), as the kernel keeps them in shmem.
const Inline = 1024

// bigKeyCharge is what a big_key costs its owner's byte quota whatever its
// size: the kernel charges the fixed size of its handle.
const bigKeyCharge = 16

// sealed is a big_key payload kept encrypted in an unlinked file.
type sealed struct {
	mu   sync.Mutex
	f    *os.File
	key  [32]byte
	size int
	// acct is whom the file is charged to.
	acct keys.Account
}

// PayloadLen is the sealed plaintext's length ([keys.Payload.Len]).
func (b *sealed) PayloadLen(int) int { return b.size }

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
		b.acct.GiveFile()
	}
}

func (b *sealed) open() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.f == nil {
		return nil, keys.EKEYREVOKED
	}
	st, err := b.f.Stat()
	if err != nil {
		return nil, keys.EIO
	}
	box := make([]byte, st.Size())
	if _, err := b.f.ReadAt(box, 0); err != nil {
		return nil, keys.EIO
	}
	aead, err := newAEAD(b.key[:])
	if err != nil {
		return nil, keys.EIO
	}
	ns := aead.NonceSize()
	if len(box) < ns {
		return nil, keys.EIO
	}
	out, err := aead.Open(nil, box[:ns], box[ns:], nil)
	if err != nil {
		return nil, keys.EIO
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

// seal keeps data in a file charged to acct.
func seal(data []byte, acct keys.Account) (*sealed, error) {
	b := &sealed{size: len(data), acct: acct}
	if _, err := rand.Read(b.key[:]); err != nil {
		return nil, keys.ENOMEM
	}
	aead, err := newAEAD(b.key[:])
	if err != nil {
		return nil, keys.ENOMEM
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, keys.ENOMEM
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
	if err := acct.TakeFile(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "ukeys-big_key-*")
	if err != nil {
		acct.GiveFile()
		return nil, keys.ENOMEM
	}
	_ = os.Remove(f.Name()) // unlinked: reachable only through this handle
	if _, err := f.Write(box); err != nil {
		_ = f.Close()
		acct.GiveFile()
		return nil, keys.ENOMEM
	}
	b.f = f
	return b, nil
}

// zeros is what a sealed file is overwritten with; nothing writes it.
var zeros [64 << 10]byte

// boxes holds the buffers sealed boxes are made in (wiped when put back).
var boxes = sync.Pool{New: func() any { return new([]byte) }}

// preparse is big_key's PreparseFor: a payload of up to Inline bytes
// stays in memory, a larger one goes to a file charged to acct.
func preparse(data []byte, acct keys.Account) (*keys.Payload, int, error) {
	if len(data) == 0 || len(data) > keys.MaxBigKeyPayload {
		return nil, 0, keys.EINVAL
	}
	if len(data) <= Inline {
		return keys.NewPayload(data), bigKeyCharge, nil
	}
	b, err := seal(data, acct)
	if err != nil {
		return nil, 0, err
	}
	return &keys.Payload{Extra: b}, bigKeyCharge, nil
}

func init() { keys.Register(bigKeyType) }

var bigKeyType = &keys.Type{
	Name:        "big_key",
	PreparseFor: preparse,
	Preparse: func(data []byte) (*keys.Payload, int, error) {
		return preparse(data, keys.Account{})
	},
	MaxSize:   keys.MaxBigKeyPayload,
	Updatable: true,
	Read: func(p *keys.Payload) ([]byte, error) {
		if b, ok := p.Extra.(*sealed); ok {
			return b.open()
		}
		return p.Data, nil
	},
	// A daemon that takes over gets the plaintext, which it seals again
	// in a file of its own with a key of its own.
	Export: func(p *keys.Payload, write func([]byte)) error {
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
	Describe: func(k *keys.Key, p *keys.Payload) string {
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
