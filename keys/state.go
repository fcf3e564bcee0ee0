package keys

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The state stream: everything a Service holds, written by one daemon
// (Export) and read by the daemon that takes over from it (Import), so
// that an upgrade loses no key. It is a compact binary stream of
// varints and length-prefixed strings, versioned as a whole: a reader of
// version N reads every version from 1 to N, and refuses a later one
// (ErrStateVersion) so that the daemon that wrote it keeps serving.
//
// The stream is hostile input to the reader, as every byte from another
// process is: every count and length is bounded, every reference must
// name a key of the stream, the keyrings must form no loop, and what the
// reader charges to each owner's quota it works out from the keys it
// makes, never from the stream's word.

// StateVersion is the version of the state stream this package writes.
const StateVersion = 1

// stateMagic opens every stream.
const stateMagic = "ukeys state\n"

// ErrStateVersion is returned by [Import] for a stream of a version it
// does not read.
var ErrStateVersion = errors.New("keys: state stream of an unknown version")

// ErrStateCorrupt wraps what [Import] finds wrong in a stream.
var ErrStateCorrupt = errors.New("keys: corrupt state stream")

// corrupt returns an ErrStateCorrupt saying what.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrStateCorrupt, fmt.Sprintf(format, args...))
}

// Bounds of what a stream may hold. They are the service's own bounds:
// nothing a daemon can hold is refused.
const (
	stateMaxKeys    = 1 << 31 // serials are positive int32s
	stateMaxString  = 4096    // descriptions and type names (the kernel's PAGE_SIZE)
	stateMaxPayload = 1 << 30 // a big_key's payload is at most 1 MiB; a type's export a little more
)

// stateWriter writes the stream's items through a buffer, remembering
// the first error so that a writer checks once at the end.
type stateWriter struct {
	w   *bufio.Writer
	err error
	// bytesFn is bytes as a func value, made once: a payload's export
	// takes one, and a method value per key would allocate.
	bytesFn func([]byte)
}

func newStateWriter(w io.Writer) *stateWriter {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	e := &stateWriter{w: bw}
	e.bytesFn = e.bytes
	return e
}

func (e *stateWriter) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// uvarint and varint append to the writer's own buffer (AvailableBuffer)
// and write that: one copy onto itself, no call per byte.
func (e *stateWriter) uvarint(v uint64) {
	if e.err == nil {
		_, e.err = e.w.Write(binary.AppendUvarint(e.w.AvailableBuffer(), v))
	}
}

func (e *stateWriter) varint(v int64) {
	if e.err == nil {
		_, e.err = e.w.Write(binary.AppendVarint(e.w.AvailableBuffer(), v))
	}
}

func (e *stateWriter) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	e.raw(b)
}

func (e *stateWriter) str(s string) {
	e.uvarint(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

// flush writes out what is buffered, and wipes the buffer: it has held
// payloads.
func (e *stateWriter) flush() error {
	if e.err == nil {
		e.err = e.w.Flush()
	}
	wipeBufio(e.w)
	return e.err
}

// wipeBufio zeroes a bufio.Writer's buffer, which its Reset keeps.
func wipeBufio(w *bufio.Writer) {
	b := w.AvailableBuffer()
	clear(b[:cap(b)])
}

// stateReader reads the stream's items, remembering the first error.
type stateReader struct {
	r   *wipingReader
	err error
	// scratch holds payload bytes between reading and importing; it is
	// wiped after each use.
	scratch []byte
}

func newStateReader(r io.Reader) *stateReader {
	return &stateReader{r: &wipingReader{src: r, buf: make([]byte, 64<<10)}}
}

// wipingReader is a buffered reader whose buffer can be wiped, unlike a
// bufio.Reader's: the stream carries payloads.
type wipingReader struct {
	src  io.Reader
	buf  []byte
	r, w int
	err  error
}

func (b *wipingReader) fill() {
	if b.r == b.w {
		b.r, b.w = 0, 0
	}
	for b.w < len(b.buf) && b.err == nil {
		n, err := b.src.Read(b.buf[b.w:])
		b.w += n
		if err != nil {
			b.err = err
		}
		if n > 0 {
			return
		}
	}
}

func (b *wipingReader) ReadByte() (byte, error) {
	if b.r == b.w {
		if b.err != nil {
			return 0, b.err
		}
		b.fill()
		if b.r == b.w {
			return 0, b.err
		}
	}
	c := b.buf[b.r]
	b.r++
	return c, nil
}

func (b *wipingReader) Read(p []byte) (int, error) {
	if b.r == b.w {
		if b.err != nil {
			return 0, b.err
		}
		if len(p) >= len(b.buf) {
			return b.src.Read(p) // straight into the caller's buffer
		}
		b.fill()
		if b.r == b.w {
			return 0, b.err
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

func (b *wipingReader) wipe() { clear(b.buf) }

func (d *stateReader) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *stateReader) uvarint(max uint64, what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(d.varintErr(err, what))
		return 0
	}
	if v > max {
		d.fail(corrupt("%s %d out of range", what, v))
		return 0
	}
	return v
}

func (d *stateReader) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(d.varintErr(err, what))
		return 0
	}
	return v
}

// bytes reads a length-prefixed string of at most max bytes into the
// reader's scratch buffer: the result is valid until the next call, and
// the caller wipes it (wipe) once it has what it needs.
func (d *stateReader) bytes(limit int, what string) []byte {
	n := int(d.uvarint(uint64(limit), what))
	if d.err != nil {
		return nil
	}
	// The buffer grows as the bytes arrive, not to the length claimed:
	// a stream that claims a GiB and ends makes the reader allocate, and
	// wipe, no GiB.
	b := d.scratch[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			grown := make([]byte, len(b), min(n, max(2*cap(b), 4096)))
			copy(grown, b)
			clear(b[:cap(b)])
			b = grown
		}
		m, err := io.ReadFull(d.r, b[len(b):min(n, cap(b))])
		b = b[:len(b)+m]
		if err != nil {
			d.scratch = b
			d.fail(readErr(err, what))
			return nil
		}
	}
	d.scratch = b
	return b
}

func (d *stateReader) str(max int, what string) string {
	b := d.bytes(max, what)
	s := string(b)
	clear(b)
	return s
}

// wipe zeroes the reader's buffers.
func (d *stateReader) wipe() {
	clear(d.scratch[:cap(d.scratch)])
	d.r.wipe()
}

// varintErr tells a varint that overflows (corrupt) from the source's
// failure.
func (d *stateReader) varintErr(err error, what string) error {
	if err != d.r.err {
		return corrupt("%s overflows", what)
	}
	return readErr(err, what)
}

func readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt("the stream ends in %s", what)
	}
	return fmt.Errorf("keys: reading the state stream (%s): %w", what, err)
}

// serial reads a serial: positive, or 0 where zero means none.
func (d *stateReader) serial(what string) Serial {
	return Serial(d.uvarint(math.MaxInt32, what))
}
