package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Reader reads frames from a stream into one buffer that it owns, and
// wipes every byte it has handed out once the caller is done with it. A
// [bufio.Reader] would keep the raw bytes of past frames (payloads
// included) in its buffer until they happen to be overwritten; a server
// that must not keep a destroyed key's payload around cannot use one.
//
// A frame no larger than the buffer is read in place, with as few read
// calls as the stream allows (a header and its body, or several
// pipelined frames, usually arrive in one). A larger frame grows the
// buffer to hold it, up to the limit; once it has been handed out, the
// buffer shrinks back (see [Reader.Release]).
type Reader struct {
	r     io.Reader
	buf   []byte
	base  int // the capacity the buffer returns to
	limit int // the largest body Next accepts
	rd    int // start of the unread bytes
	wr    int // end of the unread bytes
	out   int // end of the frame handed out by Next (its bytes are buf[:out] at most)

	head    [16]byte // the head of a frame handed out by Skip
	skipped bool

	mem Memory // where buf comes from; nil: Go's heap
}

// Memory is where a [Reader] keeps its buffer: Go's heap unless
// [Reader.SetMemory] says otherwise (a daemon's memory that is locked and
// never dumped, since the frames it reads carry payloads). Alloc returns n
// zeroed bytes (n > 0, len and cap n); Free wipes b, which Alloc returned,
// and takes it back: nothing may use b after.
//
// Copy is the copy the Reader makes within its buffers (moving unread
// bytes to the front, growing or shrinking), as the built-in copy with
// dst never after src: the built-in's goes through the processor's
// vector registers, which keep pieces of what it copied until something
// else overwrites them, and a signal delivered meanwhile writes them
// into memory the Memory does not hold (the signal's stack). A Memory
// for secrets copies through no such register.
type Memory interface {
	Alloc(n int) []byte
	Free(b []byte)
	Copy(dst, src []byte) int
}

// SetMemory makes the [Reader] take its buffers from m (nil: Go's heap).
// Call it before the first read; the Reader frees what it holds with m when
// it shrinks its buffer and in [Reader.Release], which its owner must call
// once done with it.
func (r *Reader) SetMemory(m Memory) { r.mem = m }

// alloc returns n zeroed bytes from the Reader's memory.
func (r *Reader) alloc(n int) []byte {
	if r.mem == nil {
		return make([]byte, n)
	}
	return r.mem.Alloc(n)
}

// copy is the built-in copy, or the Memory's.
func (r *Reader) copy(dst, src []byte) int {
	if r.mem == nil {
		return copy(dst, src)
	}
	return r.mem.Copy(dst, src)
}

// free wipes b and gives it back to the Reader's memory.
func (r *Reader) free(b []byte) {
	if r.mem == nil || cap(b) == 0 {
		clear(b[:cap(b)])
		return
	}
	r.mem.Free(b[:cap(b)])
}

// NewReader returns a [Reader] of r whose buffer holds size bytes between
// large frames, accepting bodies up to [MaxFrame].
func NewReader(r io.Reader, size int) *Reader {
	size = max(size, 64)
	return &Reader{r: r, base: size, limit: MaxFrame}
}

// SetLimit sets the largest body that [Reader.Next] and [Reader.NextLen]
// accept (at most [MaxFrame]). A server limits a connection's first frame to
// the size of a Hello, so that nobody can make it buffer a megabyte before
// saying who it is.
func (r *Reader) SetLimit(n int) { r.limit = min(max(n, 0), MaxFrame) }

// Buffered returns how many bytes have been read from the stream and not
// yet handed out.
func (r *Reader) Buffered() int { return r.wr - r.rd }

// WholeFrameBuffered reports whether a whole frame (within the limit) is
// buffered, so that [Reader.Next] will not read from the stream.
func (r *Reader) WholeFrameBuffered() bool {
	if r.Buffered() < 4 {
		return false
	}
	n := int(binary.BigEndian.Uint32(r.buf[r.rd:]))
	return n <= r.limit && r.Buffered() >= 4+n
}

// NextLen waits until the next frame's length prefix has arrived and returns
// the body's length without consuming anything, so that the caller can
// decide whether to read it ([Reader.Next]) or skip it ([Reader.Skip]). It
// wipes the frame handed out before, as Next does.
func (r *Reader) NextLen() (int, error) {
	r.wipeOut()
	if err := r.fill(4); err != nil {
		return 0, err
	}
	n := binary.BigEndian.Uint32(r.buf[r.rd:])
	if n > uint32(r.limit) {
		return 0, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	return int(n), nil
}

// Next reads the next frame and returns its body, which is valid until the
// next call of Next, [Reader.NextLen], [Reader.Skip] or [Reader.Release]:
// the [Reader] wipes it then.
func (r *Reader) Next() ([]byte, error) {
	n, err := r.NextLen()
	if err != nil {
		return nil, err
	}
	if err := r.fill(4 + n); err != nil {
		return nil, err
	}
	clear(r.buf[r.rd : r.rd+4])
	body := r.buf[r.rd+4 : r.rd+4+n : r.rd+4+n]
	r.rd += 4 + n
	r.out = r.rd
	return body, nil
}

// Skip consumes the next frame without buffering more than the first head
// bytes of its body (at most 16), which it returns, valid as [Reader.Next]'s
// body is. A server uses it to answer a request that it will not hold in
// memory: the head carries the tag.
func (r *Reader) Skip(head int) ([]byte, error) {
	n, err := r.NextLen()
	if err != nil {
		return nil, err
	}
	head = min(head, n, len(r.head))
	if err := r.fill(4 + head); err != nil {
		return nil, err
	}
	copy(r.head[:], r.buf[r.rd+4:r.rd+4+head])
	clear(r.buf[r.rd : r.rd+4])
	r.rd += 4
	for rest := n; rest > 0; {
		if r.Buffered() == 0 {
			if err := r.readMore(); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
			continue
		}
		k := min(rest, r.Buffered())
		clear(r.buf[r.rd : r.rd+k])
		r.rd += k
		rest -= k
	}
	r.out = r.rd
	r.skipped = true
	return r.head[:head:head], nil
}

// Fill reads once from the stream into the buffer, without handing anything
// out; the next [Reader.Next] or [Reader.NextLen] starts from what it read.
// A caller that knows the stream is readable right now (a raw read's
// callback) takes what arrived this way instead of waiting on the stream a
// second time. It wipes the frame handed out before, as Next does.
func (r *Reader) Fill() error {
	r.wipeOut()
	return r.readMore()
}

// Unread returns a copy of the bytes read from the stream and not yet handed
// out (a frame begun, or frames pipelined behind the last), nil if there are
// none: what a daemon handing a connection over gives the next one
// ([Reader.Preload]). The copy is made in the [Reader]'s [Memory]; the
// caller frees it there once done with it (in Go's heap: wipes it).
func (r *Reader) Unread() []byte {
	if r.Buffered() == 0 {
		return nil
	}
	u := r.alloc(r.Buffered())
	r.copy(u, r.buf[r.rd:r.wr])
	return u
}

// Preload puts b in the buffer as if it had been read from the stream,
// ahead of anything read later. It is for a fresh [Reader]: a connection
// taken over, whose previous daemon had read b.
func (r *Reader) Preload(b []byte) {
	if len(b) == 0 {
		return
	}
	// makeRoom leaves the unread bytes at the front of a buffer that
	// holds them and b.
	r.makeRoom(r.Buffered() + len(b))
	r.wr += r.copy(r.buf[r.wr:], b)
}

// Release wipes every byte the [Reader] holds, handed out or not, and
// frees its buffer. The Reader remains usable, with a new buffer (bytes
// not yet handed out are lost: call it between frames, or when done with
// the stream, as the owner of a Reader with a [Memory] must).
func (r *Reader) Release() {
	if r.buf != nil {
		r.free(r.buf)
	}
	clear(r.head[:])
	r.buf, r.rd, r.wr, r.out, r.skipped = nil, 0, 0, 0, false
}

// Done wipes the frame handed out last and shrinks a buffer grown for it,
// without waiting for the next frame to arrive ([Reader.Next],
// [Reader.NextLen] and [Reader.Skip] do it themselves): a server calls it
// once a request is answered, so that an idle connection holds neither a
// payload nor a megabyte.
func (r *Reader) Done() { r.wipeOut() }

// Held returns how many bytes of memory the [Reader]'s buffer holds.
func (r *Reader) Held() int { return cap(r.buf) }

// wipeOut wipes the bytes handed out by the last Next or Skip, and
// shrinks a buffer grown for a large frame once nothing unread is left
// in it beyond what the base size holds.
func (r *Reader) wipeOut() {
	if r.skipped {
		clear(r.head[:])
		r.skipped = false
	}
	if r.out == 0 {
		return
	}
	clear(r.buf[:r.out])
	r.out = 0
	if r.rd == r.wr {
		r.rd, r.wr = 0, 0
	}
	if cap(r.buf) > r.base && r.Buffered() <= r.base {
		small := r.alloc(r.base)
		r.wr = r.copy(small, r.buf[r.rd:r.wr])
		r.free(r.buf)
		r.buf, r.rd = small, 0
	}
}

// fill reads until at least n unread bytes are buffered.
func (r *Reader) fill(n int) error {
	for r.Buffered() < n {
		if r.rd+n > len(r.buf) {
			r.makeRoom(n)
		}
		if err := r.readMore(); err != nil {
			if err == io.EOF && r.Buffered() > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// makeRoom moves the unread bytes to the front of the buffer, growing it
// if n bytes would not fit, and wipes where they were.
func (r *Reader) makeRoom(n int) {
	if r.buf == nil {
		r.buf = r.alloc(r.base)
	}
	if n > len(r.buf) {
		grown := r.alloc(n)
		r.wr = r.copy(grown, r.buf[r.rd:r.wr])
		r.free(r.buf)
		r.buf, r.rd = grown, 0
		return
	}
	if r.rd == 0 {
		return
	}
	m := r.copy(r.buf, r.buf[r.rd:r.wr])
	clear(r.buf[m:r.wr])
	r.rd, r.wr = 0, m
}

// readMore reads once into the free end of the buffer.
func (r *Reader) readMore() error {
	if r.buf == nil {
		r.buf = r.alloc(r.base)
	}
	if r.wr == len(r.buf) {
		r.makeRoom(r.Buffered() + 1) // moves the unread bytes, or grows
	}
	for {
		k, err := r.r.Read(r.buf[r.wr:])
		if k < 0 || k > len(r.buf)-r.wr {
			return fmt.Errorf("wire: reader returned %d bytes", k)
		}
		r.wr += k
		if k > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
