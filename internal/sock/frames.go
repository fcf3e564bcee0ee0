package sock

import "github.com/ukeys/ukeys/wire"

// KeepMax is the largest buffer kept for reuse once wiped: one large
// frame (a megabyte payload) does not pin its buffer for the life of the
// connection, while the common small ones allocate nothing.
const KeepMax = 64 << 10

// Recycle wipes b and returns it empty for reuse, or nil if its capacity
// is above KeepMax.
func Recycle(b []byte) []byte {
	clear(b[:cap(b)])
	if cap(b) > KeepMax {
		return nil
	}
	return b[:0]
}

// Frames is a buffer of outgoing frames, built in place so that they go
// out in one write.
type Frames struct{ b []byte }

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
// with the earlier frames in it, which no Reset would reach (an audit
// found a pipelined answer's payload so left in the daemon's heap).
func (f *Frames) reserve(n int) {
	if cap(f.b)-len(f.b) >= n {
		return
	}
	nb := make([]byte, len(f.b), max(2*cap(f.b), len(f.b)+n))
	copy(nb, f.b)
	clear(f.b[:cap(f.b)])
	f.b = nb
}

func (f *Frames) seal(b []byte, at int, err error) error {
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

// Reset wipes the buffer for the next frames (Recycle) and reports
// whether it was dropped for being larger than KeepMax.
func (f *Frames) Reset() (dropped bool) {
	dropped = cap(f.b) > KeepMax
	f.b = Recycle(f.b)
	return dropped
}
