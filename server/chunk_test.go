package server

import (
	"bytes"
	"testing"
)

// TestChunkWriterDiscardWipes: a state stream abandoned unfinished
// (Export refused with EBUSY) leaves its last chunk's payload bytes in
// the writer's buffer until writeState discards them.
func TestChunkWriterDiscardWipes(t *testing.T) {
	var out bytes.Buffer
	cw := newChunkWriter(&out)
	defer cw.release()
	secret := bytes.Repeat([]byte("secret "), 100)
	if _, err := cw.Write(secret); err != nil {
		t.Fatal(err)
	}
	cw.discard()
	if out.Len() != 0 {
		t.Errorf("discard wrote %d bytes", out.Len())
	}
	if i := bytes.IndexFunc(cw.buf[:cap(cw.buf)], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("the buffer still holds data at %d", i)
	}
	if err := cw.Close(); err != nil || out.Len() != 4 {
		t.Errorf("after discard, Close wrote %d bytes (%v), want the empty chunk alone", out.Len(), err)
	}
}
