package main

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ukeys/ukeys/internal/secmem"
)

// The state a daemon stopped for a restart leaves in systemd's
// file-descriptor store (-fdstore-state) holds every payload. A memfd is
// shmem, which the kernel swaps out like any anonymous memory, so the
// state goes there sealed (AES-256-GCM) with a key made for that one
// stop, and the key goes beside it in a pipe, whose buffer is kernel
// memory that is never swapped (freezeToSystemd). The stream is cut in
// chunks so that neither end holds the whole plaintext: each chunk is
// sealed on its own, numbered by its nonce, and the last says it is the
// last in its additional data, so that nothing can be reordered, cut
// short or spliced from another stop's state (another key).

// stateMagic begins a sealed state; a plaintext one (from a daemon that
// did not seal it) is refused.
const stateMagic = "ukeyd-sealed-state-1\n"

// stateChunk is the plaintext of one sealed chunk.
const stateChunk = 64 << 10

// stateKeyLen is the length of the state's key (AES-256).
const stateKeyLen = 32

// boxWriter seals what is written to it in chunks and writes them to w:
// per chunk a 4-byte big-endian length of its ciphertext (its top bit set
// for the last chunk, which the additional data proves), then the
// ciphertext. Close seals the last chunk (perhaps empty) and wipes the
// buffers; it must be called for the stream to be complete.
type boxWriter struct {
	w     io.Writer
	aead  cipher.AEAD
	n     uint64 // chunks sealed
	plain []byte // cap stateChunk
	box   []byte
	err   error
	// mem is the arena's memory plain and box are in (locked, never
	// dumped), freed by Close.
	mem []byte
}

func newBoxWriter(w io.Writer, key []byte) (*boxWriter, error) {
	aead, err := stateAEAD(key)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(w, stateMagic); err != nil {
		return nil, err
	}
	mem := secmem.Alloc(stateChunk + 4 + stateChunk + aead.Overhead())
	return &boxWriter{w: w, aead: aead, mem: mem, plain: mem[:0:stateChunk], box: mem[stateChunk : stateChunk+4]}, nil
}

func stateAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != stateKeyLen {
		return nil, fmt.Errorf("the state's key is %d bytes, not %d", len(key), stateKeyLen)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// chunkNonce is chunk n's nonce: never the same twice under one key.
func chunkNonce(n uint64) []byte {
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[4:], n)
	return nonce[:]
}

// chunkAD tells the last chunk from the others.
var chunkAD = [2][]byte{{0}, {1}}

// lastChunk marks the last chunk's length.
const lastChunk = 1 << 31

func (b *boxWriter) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	written := 0
	for len(p) > 0 {
		k := copy(b.plain[len(b.plain):stateChunk], p)
		b.plain = b.plain[:len(b.plain)+k]
		p, written = p[k:], written+k
		if len(b.plain) == stateChunk && len(p) > 0 {
			// Full, and more follows: this chunk is not the last.
			if b.err = b.seal(false); b.err != nil {
				return written, b.err
			}
		}
	}
	return written, nil
}

func (b *boxWriter) seal(last bool) error {
	ad := chunkAD[0]
	if last {
		ad = chunkAD[1]
	}
	box := b.aead.Seal(b.box[:4], chunkNonce(b.n), b.plain, ad)
	clear(b.plain)
	b.plain = b.plain[:0]
	b.n++
	hdr := uint32(len(box) - 4)
	if last {
		hdr |= lastChunk
	}
	binary.BigEndian.PutUint32(box, hdr)
	_, err := b.w.Write(box)
	return err
}

// Close seals the last chunk and wipes and frees the buffers.
func (b *boxWriter) Close() error {
	if b.err == errClosed {
		return nil
	}
	if b.err == nil {
		b.err = b.seal(true)
	}
	secmem.Free(b.mem)
	b.mem, b.plain, b.box = nil, nil, nil
	err := b.err
	b.err = errClosed
	return err
}

var errClosed = errors.New("closed")

// boxReader opens a stream boxWriter made: Read returns the plaintext,
// chunk by chunk as each is opened and proved, and io.EOF only after the
// last chunk, with nothing after it. Its buffer is in the arena (locked,
// never dumped); Wipe clears and frees it.
type boxReader struct {
	r     io.Reader
	aead  cipher.AEAD
	n     uint64
	box   []byte
	plain []byte // opened and not yet read: a slice of box
	last  bool
	err   error
}

// errStateBroken is any way a sealed state fails to open.
var errStateBroken = errors.New("the sealed state does not open: cut short, altered, or sealed with another key")

func newBoxReader(r io.Reader, key []byte) (*boxReader, error) {
	aead, err := stateAEAD(key)
	if err != nil {
		return nil, err
	}
	magic := make([]byte, len(stateMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != stateMagic {
		return nil, fmt.Errorf("the state is not sealed (no %q at its start)", stateMagic[:len(stateMagic)-1])
	}
	return &boxReader{r: r, aead: aead, box: secmem.Alloc(stateChunk + aead.Overhead())}, nil
}

func (b *boxReader) Read(p []byte) (int, error) {
	for len(b.plain) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.err = b.next()
	}
	n := copy(p, b.plain)
	clear(b.plain[:n])
	b.plain = b.plain[n:]
	return n, nil
}

// next opens the next chunk into b.plain, or says why not (io.EOF after
// the last).
func (b *boxReader) next() error {
	if b.last {
		var one [1]byte
		if n, _ := io.ReadFull(b.r, one[:]); n != 0 {
			return errStateBroken // something after the last chunk
		}
		return io.EOF
	}
	var hdr [4]byte
	if _, err := io.ReadFull(b.r, hdr[:]); err != nil {
		return errStateBroken
	}
	n := binary.BigEndian.Uint32(hdr[:])
	last := n&lastChunk != 0
	n &^= lastChunk
	if n < uint32(b.aead.Overhead()) || n > uint32(len(b.box)) {
		return errStateBroken
	}
	box := b.box[:n]
	if _, err := io.ReadFull(b.r, box); err != nil {
		return errStateBroken
	}
	ad := chunkAD[0]
	if last {
		ad = chunkAD[1]
	}
	plain, err := b.aead.Open(box[:0], chunkNonce(b.n), box, ad)
	if err != nil {
		return errStateBroken
	}
	b.last = last
	b.n++
	b.plain = plain
	return nil
}

// Wipe clears what is left of the plaintext and frees the buffer; the
// reader reads no more.
func (b *boxReader) Wipe() {
	if b.box != nil {
		secmem.Free(b.box)
	}
	b.box, b.plain, b.err = nil, nil, errClosed
}
