package keys

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// Each big_key payload kept in a file holds a descriptor of the process;
// with a bound set, the big_key that would need one more fails with
// EMFILE, payloads small enough to stay in memory still succeed, and a
// destroyed key's file is given back.
func TestBigKeyFileLimit(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	base := BigKeyFiles()
	prev := SetBigKeyFileLimit(base + 2)
	defer SetBigKeyFileLimit(prev)
	big := bytes.Repeat([]byte{0x5a}, BigKeyInline+1)
	k1 := must(c.AddKey("big_key", "one", big, SessionKeyring))(t)
	must(c.AddKey("big_key", "two", big, SessionKeyring))(t)
	_, err := c.AddKey("big_key", "three", big, SessionKeyring)
	wantErr(t, "the third big_key file", err, EMFILE)
	must(c.AddKey("big_key", "small", big[:BigKeyInline], SessionKeyring))(t)
	wantErr(t, "an update that needs a file", c.Update(k1, append(big, 1)), EMFILE)
	if got := must(c.Read(k1))(t); !bytes.Equal(got, big) {
		t.Fatal("a failed update changed the payload")
	}
	if BigKeyFiles() != base+2 {
		t.Fatalf("%d files open, want %d", BigKeyFiles(), base+2)
	}
	if err := c.Unlink(k1, SessionKeyring); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.s.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}
	must(c.AddKey("big_key", "three", big, SessionKeyring))(t)
}
