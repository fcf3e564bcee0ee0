package main

import (
	"bytes"
	"io"
	"testing"
)

// A sealed state opens to what was written, whatever the sizes of the
// writes, and any change to it (a byte altered, a chunk cut off, bytes
// after the last, another key) fails to open.
func TestStateBox(t *testing.T) {
	key := bytes.Repeat([]byte{7}, stateKeyLen)
	for _, n := range []int{0, 1, stateChunk - 1, stateChunk, stateChunk + 1, 3*stateChunk + 17} {
		plain := make([]byte, n)
		for i := range plain {
			plain[i] = byte(i * 31)
		}
		var sealed bytes.Buffer
		bw, err := newBoxWriter(&sealed, key)
		if err != nil {
			t.Fatal(err)
		}
		for rest := plain; len(rest) > 0; {
			k := min(len(rest), 1000+len(rest)%7777)
			if _, err := bw.Write(rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := bw.Close(); err != nil {
			t.Fatal(err)
		}
		if n >= 16 && bytes.Contains(sealed.Bytes(), plain[:16]) {
			t.Errorf("%d bytes: plaintext in the sealed stream", n)
		}
		open := func(b, key []byte) ([]byte, error) {
			br, err := newBoxReader(bytes.NewReader(b), key)
			if err != nil {
				return nil, err
			}
			defer br.Wipe()
			return io.ReadAll(br)
		}
		got, err := open(sealed.Bytes(), key)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%d bytes: opened %d bytes, %v", n, len(got), err)
		}
		s := sealed.Bytes()
		lastLen := n % stateChunk // the last chunk's plaintext
		if n > 0 && lastLen == 0 {
			lastLen = stateChunk
		}
		bad := map[string][]byte{
			"altered":     append(append([]byte(nil), s[:len(s)-1]...), s[len(s)-1]^1),
			"cut":         s[:len(s)-1],
			"no last":     s[:len(s)-(4+16+lastLen)],
			"trailing":    append(append([]byte(nil), s...), 0),
			"not sealed":  plain,
			"another key": nil,
		}
		for name, b := range bad {
			k := key
			if name == "another key" {
				b, k = s, bytes.Repeat([]byte{8}, stateKeyLen)
			}
			if _, err := open(b, k); err == nil {
				t.Errorf("%d bytes, %s: opened", n, name)
			}
		}
	}
}
