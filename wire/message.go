package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks. Version 2 is
// version 1 with the client's promise to send one request at a time;
// version 3 is version 2 whose client polls for its answers and asks the
// server to poll for its requests (see the package documentation).
const Version = 3

// Sequential reports whether a connection that agreed on version v has
// at most one request in flight.
func Sequential(v uint16) bool { return v >= 2 }

// Polls reports whether on a connection that agreed on version v both
// ends poll for the other's next frame before they sleep.
func Polls(v uint16) bool { return v >= 3 }

// helloMagic opens every Hello.
var helloMagic = [4]byte{'U', 'K', 'E', 'Y'}

// ErrMalformed reports a body that does not decode.
var ErrMalformed = errors.New("wire: malformed message")

// EncodeHello returns the body of a Hello for version v.
func EncodeHello(v uint16) []byte {
	b := append([]byte(nil), helloMagic[:]...)
	return binary.BigEndian.AppendUint16(b, v)
}

// MaxHello bounds the first frame of a connection: a Hello, or a
// refusal, and nothing larger.
const MaxHello = 8

// EncodeRefusal returns the body of the Hello with which a server refuses
// a connection: version 0, followed by the errno that says why (EDQUOT
// when the caller's uid holds too much of the server already, EMFILE when
// the server as a whole does).
func EncodeRefusal(errno uint16) []byte {
	b := append([]byte(nil), helloMagic[:]...)
	b = binary.BigEndian.AppendUint16(b, 0)
	return binary.BigEndian.AppendUint16(b, errno)
}

// Refused is the error [DecodeHello] returns for a refusal.
type Refused struct{ Errno uint16 }

func (r *Refused) Error() string {
	return fmt.Sprintf("wire: connection refused with errno %d", r.Errno)
}

// DecodeHello returns the version of a Hello body, or a *[Refused] error
// for a refusal.
func DecodeHello(b []byte) (uint16, error) {
	if len(b) < 6 || [4]byte(b[:4]) != helloMagic {
		return 0, fmt.Errorf("%w: bad hello", ErrMalformed)
	}
	v := binary.BigEndian.Uint16(b[4:])
	switch {
	case len(b) == 6 && v != 0:
		return v, nil
	case len(b) == 8 && v == 0 && binary.BigEndian.Uint16(b[6:]) != 0:
		return 0, &Refused{Errno: binary.BigEndian.Uint16(b[6:])}
	}
	return 0, fmt.Errorf("%w: bad hello", ErrMalformed)
}

// Limits on a message's arguments.
const (
	MaxInts = 8
	MaxBufs = 8
)

const absent = 0xFFFFFFFF

// Request is one operation sent to the daemon.
type Request struct {
	Tag  uint32
	Op   Op
	Ints []int64
	// Bufs are byte strings; a nil Buf is "absent" (NULL), distinct from an
	// empty one.
	Bufs [][]byte
}

// Response answers the request with the same Tag.
type Response struct {
	Tag   uint32
	Errno uint16
	Ints  []int64
	Bufs  [][]byte
}

// FrameLen is the bytes r takes as a frame (its length prefix and its
// body): what a buffer must hold for r to be appended without growing.
func (r *Request) FrameLen() int { return 4 + bodyLen(r.Ints, r.Bufs) }

// FrameLen is the bytes r takes as a frame, as [Request.FrameLen].
func (r *Response) FrameLen() int { return 4 + bodyLen(r.Ints, r.Bufs) }

// bodyLen is the bytes appendBody writes for ints and bufs: the header
// (tag, code, counts), eight bytes an integer, and each buffer's length
// and bytes.
func bodyLen(ints []int64, bufs [][]byte) int {
	n := 8 + 8*len(ints)
	for _, b := range bufs {
		n += 4 + len(b)
	}
	return n
}

func appendBody(dst []byte, tag uint32, code uint16, ints []int64, bufs [][]byte) ([]byte, error) {
	if len(ints) > MaxInts || len(bufs) > MaxBufs {
		return dst, fmt.Errorf("%w: too many arguments", ErrMalformed)
	}
	dst = binary.BigEndian.AppendUint32(dst, tag)
	dst = binary.BigEndian.AppendUint16(dst, code)
	dst = append(dst, byte(len(ints)), byte(len(bufs)))
	for _, v := range ints {
		dst = binary.BigEndian.AppendUint64(dst, uint64(v))
	}
	for _, b := range bufs {
		if b == nil {
			dst = binary.BigEndian.AppendUint32(dst, absent)
			continue
		}
		if len(b) > MaxFrame {
			return dst, ErrFrameTooLarge
		}
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
		dst = append(dst, b...)
	}
	if len(dst) > MaxFrame {
		return dst, ErrFrameTooLarge
	}
	return dst, nil
}

// decodeBody parses a body into ints and bufs, reusing their capacity.
// Bufs alias b: callers copy what they keep. On error the results are
// meaningless.
func decodeBody(b []byte, ints []int64, bufs [][]byte) (tag uint32, code uint16, _ []int64, _ [][]byte, err error) {
	if len(b) < 8 {
		return 0, 0, nil, nil, fmt.Errorf("%w: short header", ErrMalformed)
	}
	tag = binary.BigEndian.Uint32(b)
	code = binary.BigEndian.Uint16(b[4:])
	ni, nb := int(b[6]), int(b[7])
	if ni > MaxInts || nb > MaxBufs {
		return 0, 0, nil, nil, fmt.Errorf("%w: too many arguments", ErrMalformed)
	}
	b = b[8:]
	if len(b) < 8*ni {
		return 0, 0, nil, nil, fmt.Errorf("%w: short integers", ErrMalformed)
	}
	ints = ints[:0]
	for i := range ni {
		ints = append(ints, int64(binary.BigEndian.Uint64(b[8*i:])))
	}
	b = b[8*ni:]
	bufs = bufs[:0]
	for range nb {
		if len(b) < 4 {
			return 0, 0, nil, nil, fmt.Errorf("%w: short buffer length", ErrMalformed)
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if n == absent {
			bufs = append(bufs, nil)
			continue
		}
		if uint64(n) > uint64(len(b)) {
			return 0, 0, nil, nil, fmt.Errorf("%w: buffer overruns the message", ErrMalformed)
		}
		bufs = append(bufs, b[:n:n])
		b = b[n:]
	}
	if len(b) != 0 {
		return 0, 0, nil, nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
	}
	return tag, code, ints, bufs, nil
}

// AppendRequest appends r's body to dst.
func AppendRequest(dst []byte, r *Request) ([]byte, error) {
	return appendBody(dst, r.Tag, uint16(r.Op), r.Ints, r.Bufs)
}

// DecodeRequest parses a request body. Its Bufs alias b.
func DecodeRequest(b []byte) (*Request, error) {
	r := new(Request)
	if err := r.Decode(b); err != nil {
		return nil, err
	}
	return r, nil
}

// Decode parses a request body into r, reusing the capacity of r's Ints
// and Bufs, so that a server decoding into one [Request] per connection
// allocates nothing per request. Its Bufs alias b. On error r is
// cleared.
func (r *Request) Decode(b []byte) error {
	tag, op, ints, bufs, err := decodeBody(b, r.Ints, r.Bufs)
	if err != nil {
		*r = Request{Ints: r.Ints[:0], Bufs: r.Bufs[:0]}
		return err
	}
	*r = Request{Tag: tag, Op: Op(op), Ints: ints, Bufs: bufs}
	return nil
}

// AppendResponse appends r's body to dst.
func AppendResponse(dst []byte, r *Response) ([]byte, error) {
	return appendBody(dst, r.Tag, r.Errno, r.Ints, r.Bufs)
}

// DecodeResponse parses a response body. Its Bufs alias b.
func DecodeResponse(b []byte) (*Response, error) {
	r := new(Response)
	if err := r.Decode(b); err != nil {
		return nil, err
	}
	return r, nil
}

// Decode parses a response body into r, reusing the capacity of r's Ints
// and Bufs. Its Bufs alias b. On error r is cleared.
func (r *Response) Decode(b []byte) error {
	tag, errno, ints, bufs, err := decodeBody(b, r.Ints, r.Bufs)
	if err != nil {
		*r = Response{Ints: r.Ints[:0], Bufs: r.Bufs[:0]}
		return err
	}
	*r = Response{Tag: tag, Errno: errno, Ints: ints, Bufs: bufs}
	return nil
}

// Int returns argument i, or 0 if absent.
func (r *Request) Int(i int) int64 {
	if i < len(r.Ints) {
		return r.Ints[i]
	}
	return 0
}

// Buf returns buffer i, or nil if absent.
func (r *Request) Buf(i int) []byte {
	if i < len(r.Bufs) {
		return r.Bufs[i]
	}
	return nil
}
