package bigkey

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keys"
)

// Each big_key payload kept in a file holds a descriptor of the process;
// with a bound set, the big_key that would need one more fails with
// EMFILE, payloads small enough to stay in memory still succeed, and a
// destroyed key's file is given back.
func TestBigKeyFileLimit(t *testing.T) {
	s := newService(t)
	c := caller(t, s, 0, 0)
	base := keys.BigKeyFiles()
	prev := keys.SetBigKeyFileLimit(base + 2)
	defer keys.SetBigKeyFileLimit(prev)
	big := bytes.Repeat([]byte{0x5a}, Inline+1)
	k1 := must(c.AddKey("big_key", "one", big, keys.SessionKeyring))(t)
	must(c.AddKey("big_key", "two", big, keys.SessionKeyring))(t)
	_, err := c.AddKey("big_key", "three", big, keys.SessionKeyring)
	wantErr(t, "the third big_key file", err, keys.EMFILE)
	must(c.AddKey("big_key", "small", big[:Inline], keys.SessionKeyring))(t)
	wantErr(t, "an update that needs a file", c.Update(k1, append(big, 1)), keys.EMFILE)
	if got := must(c.Read(k1))(t); !bytes.Equal(got, big) {
		t.Fatal("a failed update changed the payload")
	}
	if keys.BigKeyFiles() != base+2 {
		t.Fatalf("%d files open, want %d", keys.BigKeyFiles(), base+2)
	}
	if err := c.Unlink(k1, keys.SessionKeyring); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}
	must(c.AddKey("big_key", "three", big, keys.SessionKeyring))(t)
}
