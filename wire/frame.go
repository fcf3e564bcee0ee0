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

// ErrFrameTooLarge reports a frame longer than [MaxFrame].
var ErrFrameTooLarge = errors.New("wire: frame too large")

// ReadFrame reads one frame's body. buf is reused if it is large enough;
// the length prefix is read into buf too, so that a reader that reuses
// its buffer reads frames without allocating.
func ReadFrame(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < 4 {
		buf = make([]byte, 4, 256)
	}
	hdr := buf[:4]
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr)
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

// BeginFrame appends room for a frame's length prefix to dst; append the
// body after it and seal the frame with [EndFrame]. Building a frame in
// place saves the copy [AppendFrame] makes, and the frame goes out in one
// write.
func BeginFrame(dst []byte) []byte { return append(dst, 0, 0, 0, 0) }

// EndFrame fills in the length prefix of the frame that [BeginFrame] began
// at offset start of f.
func EndFrame(f []byte, start int) ([]byte, error) {
	n := len(f) - start - 4
	if n < 0 {
		return f, fmt.Errorf("%w: no frame begun at %d", ErrMalformed, start)
	}
	if n > MaxFrame {
		return f, ErrFrameTooLarge
	}
	binary.BigEndian.PutUint32(f[start:], uint32(n))
	return f, nil
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
