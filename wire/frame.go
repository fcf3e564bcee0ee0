package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrame bounds a frame's body: the largest payload (1 MiB) plus room
// for the other arguments.
const MaxFrame = 1<<20 + 64<<10

// ErrFrameTooLarge reports a frame longer than MaxFrame.
var ErrFrameTooLarge = errors.New("wire: frame too large")

// ReadFrame reads one frame's body. buf is reused if it is large enough.
func ReadFrame(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// AppendFrame appends body as a frame to dst.
func AppendFrame(dst, body []byte) ([]byte, error) {
	if len(body) > MaxFrame {
		return dst, ErrFrameTooLarge
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...), nil
}

// WriteFrame writes body as one frame.
func WriteFrame(w io.Writer, body []byte) error {
	f, err := AppendFrame(make([]byte, 0, 4+len(body)), body)
	if err != nil {
		return err
	}
	_, err = w.Write(f)
	return err
}
