package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks.
const Version = 1

// helloMagic opens every Hello.
var helloMagic = [4]byte{'U', 'K', 'E', 'Y'}

// ErrMalformed reports a body that does not decode.
var ErrMalformed = errors.New("wire: malformed message")

// EncodeHello returns the body of a Hello for version v.
func EncodeHello(v uint16) []byte {
	b := append([]byte(nil), helloMagic[:]...)
	return binary.BigEndian.AppendUint16(b, v)
}

// DecodeHello returns the version of a Hello body.
func DecodeHello(b []byte) (uint16, error) {
	if len(b) != 6 || [4]byte(b[:4]) != helloMagic {
		return 0, fmt.Errorf("%w: bad hello", ErrMalformed)
	}
	return binary.BigEndian.Uint16(b[4:]), nil
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

// decodeBody parses a body. Bufs alias b: callers copy what they keep.
func decodeBody(b []byte) (tag uint32, code uint16, ints []int64, bufs [][]byte, err error) {
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
	if ni > 0 {
		ints = make([]int64, ni)
		for i := range ints {
			ints[i] = int64(binary.BigEndian.Uint64(b[8*i:]))
		}
	}
	b = b[8*ni:]
	if nb > 0 {
		bufs = make([][]byte, nb)
	}
	for i := 0; i < nb; i++ {
		if len(b) < 4 {
			return 0, 0, nil, nil, fmt.Errorf("%w: short buffer length", ErrMalformed)
		}
		n := binary.BigEndian.Uint32(b)
		b = b[4:]
		if n == absent {
			continue
		}
		if uint64(n) > uint64(len(b)) {
			return 0, 0, nil, nil, fmt.Errorf("%w: buffer overruns the message", ErrMalformed)
		}
		bufs[i] = b[:n:n]
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
	tag, op, ints, bufs, err := decodeBody(b)
	if err != nil {
		return nil, err
	}
	return &Request{Tag: tag, Op: Op(op), Ints: ints, Bufs: bufs}, nil
}

// AppendResponse appends r's body to dst.
func AppendResponse(dst []byte, r *Response) ([]byte, error) {
	return appendBody(dst, r.Tag, r.Errno, r.Ints, r.Bufs)
}

// DecodeResponse parses a response body. Its Bufs alias b.
func DecodeResponse(b []byte) (*Response, error) {
	tag, errno, ints, bufs, err := decodeBody(b)
	if err != nil {
		return nil, err
	}
	return &Response{Tag: tag, Errno: errno, Ints: ints, Bufs: bufs}, nil
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
