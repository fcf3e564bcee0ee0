package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// allOps lists every operation, so that the fuzz targets below build and
// parse a request of each kind.
func allOps() []Op {
	var ops []Op
	for s := range Specs() {
		ops = append(ops, s.Op)
	}
	return ops
}

// A stream of frames read as the daemon reads them: one buffered reader,
// the body buffer reused from frame to frame. Each body is tried as every
// message kind; whatever decodes re-encodes to the same bytes, and no
// frame is larger than MaxFrame or than the input.
func FuzzFrameStream(f *testing.F) {
	var seed []byte
	seed, _ = AppendFrame(seed, EncodeHello(Version))
	for _, op := range allOps() {
		body, _ := AppendRequest(nil, &Request{Tag: uint32(op), Op: op, Ints: []int64{-3, 1}, Bufs: [][]byte{[]byte("user"), nil, {}}})
		seed, _ = AppendFrame(seed, body)
	}
	resp, _ := AppendResponse(nil, &Response{Tag: 1, Errno: 126})
	seed, _ = AppendFrame(seed, resp)
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(stream), 16<<10)
		var buf []byte
		total := 0
		for {
			body, err := ReadFrame(br, buf)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			total += 4 + len(body)
			if len(body) > MaxFrame || total > len(stream) {
				t.Fatalf("frame of %d bytes, %d read from %d", len(body), total, len(stream))
			}
			buf = body
			if v, err := DecodeHello(body); err == nil && !bytes.Equal(EncodeHello(v), body) {
				t.Fatalf("hello %x", body)
			}
			if r, err := DecodeRequest(body); err == nil {
				if again, err := AppendRequest(nil, r); err != nil || !bytes.Equal(again, body) {
					t.Fatalf("request re-encodes differently: %v", err)
				}
			}
			if r, err := DecodeResponse(body); err == nil {
				if again, err := AppendResponse(nil, r); err != nil || !bytes.Equal(again, body) {
					t.Fatalf("response re-encodes differently: %v", err)
				}
			}
		}
	})
}

// Every operation with fuzzed arguments survives encoding and decoding
// unchanged, absent buffers staying absent and empty ones empty; a request
// past the limits is refused by the encoder, never sent malformed.
func FuzzRequestEveryOp(f *testing.F) {
	f.Add(uint8(0), uint32(1), []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte("user\x00desc\x00\x01"), uint8(3))
	f.Add(uint8(7), uint32(0xffffffff), []byte{}, []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, which uint8, tag uint32, intBytes, bufBytes []byte, absentMask uint8) {
		ops := allOps()
		op := ops[int(which)%len(ops)]
		var ints []int64
		for len(intBytes) >= 8 {
			ints = append(ints, int64(binary.BigEndian.Uint64(intBytes)))
			intBytes = intBytes[8:]
		}
		var bufs [][]byte
		for i, b := range bytes.Split(bufBytes, []byte{0}) {
			if absentMask&(1<<(i%8)) != 0 {
				b = nil
			}
			bufs = append(bufs, b)
		}
		in := &Request{Tag: tag, Op: op, Ints: ints, Bufs: bufs}
		body, err := AppendRequest(nil, in)
		if len(ints) > MaxInts || len(bufs) > MaxBufs {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%d ints, %d bufs: %v", len(ints), len(bufs), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := DecodeRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Ints) == 0 {
			in.Ints = nil
		}
		if len(in.Bufs) == 0 {
			in.Bufs = nil
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%v: sent %#v, got %#v", op, in, out)
		}
		if !op.Known() || op.String() == "unknown" {
			t.Fatalf("%d is listed but not known", op)
		}
	})
}
