package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRequestRoundTrip(t *testing.T) {
	in := &Request{Tag: 7, Op: OpAddKey, Ints: []int64{-3}, Bufs: [][]byte{[]byte("user"), []byte("desc"), {}, nil}}
	body, err := AppendRequest(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	var frame bytes.Buffer
	if err := WriteFrame(&frame, body); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(&frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeRequest(got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %#v\nout %#v", in, out)
	}
	if out.Bufs[2] == nil || out.Bufs[3] != nil {
		t.Fatal("empty and absent buffers must stay distinct")
	}
}

func TestResponseRoundTrip(t *testing.T) {
	in := &Response{Tag: 9, Errno: 126}
	body, _ := AppendResponse(nil, in)
	out, err := DecodeResponse(body)
	if err != nil || out.Tag != 9 || out.Errno != 126 || out.Ints != nil || out.Bufs != nil {
		t.Fatalf("got %#v, %v", out, err)
	}
}

func TestHello(t *testing.T) {
	v, err := DecodeHello(EncodeHello(Version))
	if err != nil || v != Version {
		t.Fatalf("hello: %d %v", v, err)
	}
	for _, bad := range [][]byte{nil, []byte("UKEY"), []byte("NOPE\x00\x01"), []byte("UKEY\x00\x01x")} {
		if _, err := DecodeHello(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeHello(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestFrameLimits(t *testing.T) {
	hdr := []byte{0xff, 0xff, 0xff, 0xff}
	if _, err := ReadFrame(bytes.NewReader(hdr), nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 5, 1, 2}), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
	if _, err := AppendRequest(nil, &Request{Bufs: [][]byte{make([]byte, MaxFrame)}}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized request: %v", err)
	}
	if _, err := AppendRequest(nil, &Request{Ints: make([]int64, MaxInts+1)}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("too many ints: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := map[string][]byte{
		"short":         {0, 0, 0, 1, 0, 3},
		"too many ints": {0, 0, 0, 1, 0, 3, 9, 0},
		"short ints":    {0, 0, 0, 1, 0, 3, 1, 0, 0, 0},
		"overrun":       {0, 0, 0, 1, 0, 3, 0, 1, 0, 0, 0, 9, 'a'},
		"trailing":      {0, 0, 0, 1, 0, 3, 0, 0, 'x'},
	}
	for name, b := range cases {
		if _, err := DecodeRequest(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	body, _ := AppendRequest(nil, &Request{Tag: 1, Op: OpSearch, Ints: []int64{-3, 0}, Bufs: [][]byte{[]byte("user"), nil}})
	f.Add(body)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		again, err := AppendRequest(nil, r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs: %v\n%x\n%x", err, b, again)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	body, _ := AppendResponse(nil, &Response{Tag: 2, Ints: []int64{5}, Bufs: [][]byte{[]byte("data")}})
	f.Add(body)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		again, err := AppendResponse(nil, r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 'h', 'i'})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := ReadFrame(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		if len(body) > MaxFrame || len(body)+4 > len(b) {
			t.Fatalf("frame of %d bytes from %d input bytes", len(body), len(b))
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(EncodeHello(Version))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v, err := DecodeHello(b); err == nil && !bytes.Equal(EncodeHello(v), b) {
			t.Fatalf("hello %x decoded to %d", b, v)
		}
	})
}
