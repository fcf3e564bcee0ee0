package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// chunked reads its data a few bytes at a time, sizes taken in turn from
// sizes: the way a socket may deliver a stream.
type chunked struct {
	data  []byte
	sizes []byte
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[c.i%len(c.sizes)])+1)
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

// checkWiped fails unless every byte of r's buffer outside the body just
// handed out and the unread bytes is zero.
func checkWiped(t *testing.T, r *Reader, body []byte) {
	t.Helper()
	bodyStart := r.out - len(body)
	for i, b := range r.buf {
		inBody := i >= bodyStart && i < r.out
		unread := i >= r.rd && i < r.wr
		if b != 0 && !inBody && !unread {
			t.Fatalf("byte %d of %d is %#x, outside the body [%d,%d) and the unread bytes [%d,%d)", i, len(r.buf), b, bodyStart, r.out, r.rd, r.wr)
		}
	}
}

func frames(bodies ...[]byte) []byte {
	var s []byte
	for _, b := range bodies {
		s, _ = AppendFrame(s, b)
	}
	return s
}

func TestReaderFramesAndWipes(t *testing.T) {
	big := bytes.Repeat([]byte{0xAB}, 5000)
	stream := frames([]byte("one"), big, []byte{}, []byte("four"), bytes.Repeat([]byte{7}, 300))
	r := NewReader(&chunked{data: stream, sizes: []byte{2, 200, 0, 31}}, 256)
	want := [][]byte{[]byte("one"), big, {}, []byte("four"), bytes.Repeat([]byte{7}, 300)}
	for i, w := range want {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(w))
		}
		checkWiped(t, r, got)
		if i == 1 && r.Held() < 5000 {
			t.Fatalf("a 5000-byte frame fits in %d bytes", r.Held())
		}
		if i == 2 && r.Held() != 256 {
			t.Fatalf("after the large frame the buffer holds %d bytes, want 256", r.Held())
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	checkWiped(t, r, nil)
}

func TestReaderDoneShrinksAndWipes(t *testing.T) {
	payload := bytes.Repeat([]byte("secret"), 1000)
	r := NewReader(bytes.NewReader(frames(payload)), 128)
	body, err := r.Next()
	if err != nil || !bytes.Equal(body, payload) {
		t.Fatalf("Next: %v", err)
	}
	r.Done()
	if !bytes.Equal(body, make([]byte, len(body))) {
		t.Fatal("the body handed out survives Done")
	}
	if r.Held() != 128 {
		t.Fatalf("buffer holds %d bytes after Done, want 128", r.Held())
	}
}

func TestReaderLimit(t *testing.T) {
	r := NewReader(bytes.NewReader(frames(make([]byte, 100))), 64)
	r.SetLimit(6)
	if _, err := r.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("100-byte frame with limit 6: %v", err)
	}
	if r.Held() > 64 {
		t.Fatalf("refusing the frame buffered %d bytes", r.Held())
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<31)
	r = NewReader(bytes.NewReader(hdr[:]), 64)
	if _, err := r.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("2 GiB length prefix: %v", err)
	}
}

func TestReaderSkip(t *testing.T) {
	big := append([]byte{0, 0, 0, 9}, bytes.Repeat([]byte{0xEE}, 10000)...)
	stream := frames(big, []byte("after"))
	r := NewReader(&chunked{data: stream, sizes: []byte{100}}, 64)
	head, err := r.Skip(8)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head, big[:8]) {
		t.Fatalf("head %x", head)
	}
	if r.Held() > 64 {
		t.Fatalf("skipping a 10 KB frame grew the buffer to %d bytes", r.Held())
	}
	checkWiped(t, r, nil)
	next, err := r.Next()
	if err != nil || string(next) != "after" {
		t.Fatalf("frame after the skipped one: %q, %v", next, err)
	}
	if head[0] != 0 || head[3] != 0 || !bytes.Equal(r.head[:], make([]byte, 16)) {
		t.Fatal("the skipped head survives the next frame")
	}
}

func TestReaderWholeFrameBuffered(t *testing.T) {
	stream := frames([]byte("a"), []byte("bb"))
	r := NewReader(bytes.NewReader(stream), 64)
	if r.WholeFrameBuffered() {
		t.Fatal("nothing read yet")
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if !r.WholeFrameBuffered() || r.Buffered() != 6 {
		t.Fatalf("second frame not seen as buffered (%d bytes)", r.Buffered())
	}
}

func TestReaderTruncated(t *testing.T) {
	stream := frames([]byte("hello world"))
	r := NewReader(bytes.NewReader(stream[:8]), 64)
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
	r = NewReader(bytes.NewReader(stream[:8]), 64)
	if _, err := r.Skip(4); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated skipped frame: %v", err)
	}
}

// Reading a stream with Reader, whatever the chunking, the limit and a
// mix of Next and Skip, gives the frames ReadFrame gives, and never
// leaves a byte outside the current body and the unread bytes.
func FuzzReader(f *testing.F) {
	f.Add(frames([]byte("one"), bytes.Repeat([]byte{1}, 700), nil), []byte{3, 0, 100}, uint16(1000), byte(0))
	f.Add([]byte{0, 0, 0, 9, 1, 2}, []byte{}, uint16(6), byte(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, []byte{1}, uint16(0xffff), byte(2))
	f.Fuzz(func(t *testing.T, stream, sizes []byte, limit uint16, skips byte) {
		r := NewReader(&chunked{data: stream, sizes: sizes}, 64)
		r.SetLimit(int(limit))
		ref := bytes.NewReader(stream)
		for i := 0; ; i++ {
			want, werr := refFrame(ref, int(limit))
			skip := skips>>(i%8)&1 == 1
			var got []byte
			var err error
			if skip {
				got, err = r.Skip(4)
				if werr == nil {
					want = want[:min(4, len(want))]
				}
			} else {
				got, err = r.Next()
			}
			if (err == nil) != (werr == nil) {
				t.Fatalf("frame %d: Reader says %v, ReadFrame %v", i, err, werr)
			}
			if err != nil {
				if errors.Is(werr, ErrFrameTooLarge) != errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("frame %d: Reader says %v, ReadFrame %v", i, err, werr)
				}
				return
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("frame %d: %x, want %x", i, got, want)
			}
			if r.Held() > max(64, 4+int(limit)) {
				t.Fatalf("buffer of %d bytes with limit %d", r.Held(), limit)
			}
			if !skip {
				checkWiped(t, r, got)
			}
		}
	})
}

// refFrame reads one frame as ReadFrame does, with a limit.
func refFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if n := binary.BigEndian.Uint32(hdr[:]); n > uint32(limit) {
		return nil, ErrFrameTooLarge
	}
	return ReadFrame(io.MultiReader(bytes.NewReader(hdr[:]), r), nil)
}
