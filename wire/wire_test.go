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
	var refused *Refused
	if _, err := DecodeHello(EncodeRefusal(122)); !errors.As(err, &refused) || refused.Errno != 122 {
		t.Fatalf("refusal decoded as %v", err)
	}
	if len(EncodeRefusal(122)) > MaxHello || len(EncodeHello(Version)) > MaxHello {
		t.Fatal("a hello or refusal is longer than MaxHello")
	}
	for _, bad := range [][]byte{nil, []byte("UKEY"), []byte("NOPE\x00\x01"), []byte("UKEY\x00\x01x"),
		EncodeHello(0), EncodeRefusal(0), []byte("UKEY\x00\x01\x00\x05")} {
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

// A Request or Response decoded into again keeps nothing of the message
// before: reuse is invisible except for the allocations it saves.
func TestDecodeReuse(t *testing.T) {
	first, _ := AppendRequest(nil, &Request{Tag: 1, Op: OpAddKey, Ints: []int64{-3, 7}, Bufs: [][]byte{[]byte("user"), nil, []byte("p")}})
	second, _ := AppendRequest(nil, &Request{Tag: 2, Op: OpRead, Ints: []int64{42}, Bufs: [][]byte{nil}})
	var r Request
	if err := r.Decode(first); err != nil {
		t.Fatal(err)
	}
	if err := r.Decode(second); err != nil {
		t.Fatal(err)
	}
	if r.Tag != 2 || r.Op != OpRead || len(r.Ints) != 1 || r.Ints[0] != 42 || len(r.Bufs) != 1 || r.Bufs[0] != nil {
		t.Fatalf("second decode kept parts of the first: %#v", r)
	}
	if err := r.Decode([]byte{1, 2, 3}); !errors.Is(err, ErrMalformed) || r.Tag != 0 || len(r.Ints) != 0 || len(r.Bufs) != 0 {
		t.Fatalf("failed decode left %#v, %v", r, err)
	}
	resp, _ := AppendResponse(nil, &Response{Tag: 5, Bufs: [][]byte{[]byte("data")}})
	var out Response
	out.Ints = append(out.Ints, 9, 9)
	if err := out.Decode(resp); err != nil || out.Tag != 5 || len(out.Ints) != 0 || string(out.Bufs[0]) != "data" {
		t.Fatalf("response decode: %#v, %v", out, err)
	}
	allocs := testing.AllocsPerRun(100, func() { _ = r.Decode(second) })
	if allocs != 0 {
		t.Fatalf("decoding into a reused Request allocates %v times", allocs)
	}
}

func TestFrameInPlace(t *testing.T) {
	f := BeginFrame([]byte("xx"))
	f = append(f, "body"...)
	f, err := EndFrame(f, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(f[2:]), nil)
	if err != nil || string(got) != "body" {
		t.Fatalf("ReadFrame = %q, %v", got, err)
	}
	if _, err := EndFrame([]byte{0, 0}, 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("EndFrame without a frame: %v", err)
	}
	buf := make([]byte, 0, 64)
	rd := bytes.NewReader(nil)
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(f[2:])
		if _, err := ReadFrame(rd, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadFrame with a reused buffer allocates %v times", allocs)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	body, _ := AppendRequest(nil, &Request{Tag: 1, Op: OpSearch, Ints: []int64{-3, 0}, Bufs: [][]byte{[]byte("user"), nil}})
	f.Add(body)
	f.Add([]byte{})
	// One Request decoded into again and again, as the server does.
	reused := &Request{Ints: []int64{1, 2, 3}, Bufs: [][]byte{[]byte("old"), nil}}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if rerr := reused.Decode(b); (rerr == nil) != (err == nil) {
			t.Fatalf("fresh and reused decoding disagree: %v / %v", err, rerr)
		}
		if err != nil {
			return
		}
		if r.Tag != reused.Tag || r.Op != reused.Op || !reflect.DeepEqual(r.Ints, reused.Ints) && len(r.Ints)+len(reused.Ints) > 0 ||
			len(r.Bufs) != len(reused.Bufs) {
			t.Fatalf("fresh %#v, reused %#v", r, reused)
		}
		for i := range r.Bufs {
			if (r.Bufs[i] == nil) != (reused.Bufs[i] == nil) || !bytes.Equal(r.Bufs[i], reused.Bufs[i]) {
				t.Fatalf("buffer %d: fresh %q, reused %q", i, r.Bufs[i], reused.Bufs[i])
			}
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
	f.Add(EncodeRefusal(24))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeHello(b)
		if err == nil && !bytes.Equal(EncodeHello(v), b) {
			t.Fatalf("hello %x decoded to %d", b, v)
		}
		var r *Refused
		if errors.As(err, &r) && !bytes.Equal(EncodeRefusal(r.Errno), b) {
			t.Fatalf("refusal %x decoded to errno %d", b, r.Errno)
		}
	})
}

// FrameLen is the length of the frame AppendFrame of the encoded body
// makes, for requests and answers with integers, buffers and absent ones.
func TestFrameLen(t *testing.T) {
	req := &Request{Tag: 7, Op: OpAddKey, Ints: []int64{-3}, Bufs: [][]byte{[]byte("user"), nil, make([]byte, 300)}}
	body, err := AppendRequest(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := AppendFrame(nil, body); req.FrameLen() != len(f) {
		t.Errorf("request: FrameLen %d, frame %d bytes", req.FrameLen(), len(f))
	}
	resp := &Response{Tag: 7, Ints: []int64{1, 2}, Bufs: [][]byte{{1, 2, 3}}}
	body, err = AppendResponse(nil, resp)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := AppendFrame(nil, body); resp.FrameLen() != len(f) {
		t.Errorf("response: FrameLen %d, frame %d bytes", resp.FrameLen(), len(f))
	}
}
