package sock

import (
	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/wire"
)

// KeepMax is the largest buffer kept for reuse once wiped: one large
// frame (a megabyte payload) does not pin its buffer for the life of the
// connection, while the common small ones allocate nothing.
const KeepMax = 64 << 10

// Recycle wipes b and returns it empty for reuse, or nil if its capacity
// is above [KeepMax].
func Recycle(b []byte) []byte {
	clear(b[:cap(b)])
	if cap(b) > KeepMax {
		return nil
	}
	return b[:0]
}

// Frames is a buffer of outgoing frames, built in place so that they go
// out in one write.
type Frames struct {
	b []byte
	// arena: b is secmem's (InArena), freed when it is outgrown,
	// dropped, or released.
	arena bool
}

// InArena makes the buffer secmem's arena's from now on: locked while
// the memory lock limit allows, never dumped. Its owner must call
// [Frames.Release] once done with it.
func (f *Frames) InArena() {
	f.Release()
	f.arena = true
}

// Release wipes the buffer and frees it (a new one is made for the next
// frames).
func (f *Frames) Release() {
	f.drop()
}

// copied wipes the processor's vector registers after a frame was
// appended to an arena's buffer (by wire's built-in copy), which the
// copy left holding pieces of its bytes (payloads): a signal delivered
// before they are overwritten would write them into memory outside the
// arena (wire.Memory).
func (f *Frames) copied() {
	if f.arena {
		secmem.WipeRegisters()
	}
}

// drop wipes the buffer and lets go of it.
func (f *Frames) drop() {
	if f.arena && cap(f.b) > 0 {
		secmem.Free(f.b[:cap(f.b)])
	} else {
		clear(f.b[:cap(f.b)])
	}
	f.b = nil
}

// Request appends r as a frame. On error nothing is appended.
func (f *Frames) Request(r *wire.Request) error {
	f.reserve(r.FrameLen())
	at := len(f.b)
	b, err := wire.AppendRequest(wire.BeginFrame(f.b), r)
	return f.seal(b, at, err)
}

// Response appends r as a frame. On error nothing is appended.
func (f *Frames) Response(r *wire.Response) error {
	f.reserve(r.FrameLen())
	at := len(f.b)
	b, err := wire.AppendResponse(wire.BeginFrame(f.b), r)
	return f.seal(b, at, err)
}

// Body appends body (a Hello, say) as a frame. On error nothing is
// appended.
func (f *Frames) Body(body []byte) error {
	f.reserve(4 + len(body))
	at := len(f.b)
	return f.seal(append(wire.BeginFrame(f.b), body...), at, nil)
}

// reserve makes room for n more bytes before a frame is appended, in a
// new array if it must, and wipes the array it leaves: frames carry
// payloads, and an array that append outgrew would go to Go's collector
// with the earlier frames in it, which no Reset would reach
// (TestFramesWipeTheBufferTheyOutgrow).
func (f *Frames) reserve(n int) {
	if cap(f.b)-len(f.b) >= n {
		return
	}
	size := max(2*cap(f.b), len(f.b)+n)
	var nb []byte
	if f.arena {
		nb = secmem.Alloc(size)[:len(f.b)]
	} else {
		nb = make([]byte, len(f.b), size)
	}
	if f.arena {
		secmem.Copy(nb, f.b)
	} else {
		copy(nb, f.b)
	}
	f.drop()
	f.b = nb
}

func (f *Frames) seal(b []byte, at int, err error) error {
	f.copied() // the frame's bytes were copied in
	if err == nil {
		b, err = wire.EndFrame(b, at)
	}
	if err != nil {
		clear(b[at:cap(b)])
		f.b = b[:at]
		return err
	}
	f.b = b
	return nil
}

// Bytes returns the frames appended so far; they alias the buffer.
func (f *Frames) Bytes() []byte { return f.b }

// Len returns the bytes appended so far.
func (f *Frames) Len() int { return len(f.b) }

// Cap returns the bytes of memory the buffer holds.
func (f *Frames) Cap() int { return cap(f.b) }

// Truncate wipes and drops what was appended after the first n bytes.
func (f *Frames) Truncate(n int) {
	clear(f.b[n:])
	f.b = f.b[:n]
}

// Reset wipes the buffer for the next frames ([Recycle]) and reports
// whether it was dropped for being larger than [KeepMax].
func (f *Frames) Reset() (dropped bool) {
	dropped = cap(f.b) > KeepMax
	if dropped && f.arena {
		f.drop()
		return dropped
	}
	f.b = Recycle(f.b)
	return dropped
}
