package keys

import (
	"errors"
	"testing"
)

// TestKernelObserved replays, step by step, a script that was run with
// keyutils' keyctl against the Linux kernel on the development machine,
// and expects the kernel's answer at every step. The kernel's output is
// quoted beside each step.
func TestKernelObserved(t *testing.T) {
	e := newEnv(t)
	c := e.caller(0, 0)
	k := must(c.AddKey("user", "nr", []byte("data"), SessionKeyring))(t)

	// keyctl setperm $k 0x39000000; keyctl read $k → "4 bytes of data in key"
	// (a possessor may read even without the read bit).
	noErr(t, c.SetPerm(k, 0x39000000))
	if got := must(c.Read(k))(t); string(got) != "data" {
		t.Fatalf("possessed read without read permission = %q", got)
	}
	// keyctl setperm $k 0x3b000000; keyctl timeout $k 1; sleep; read/search
	// → "Key has expired" for both.
	noErr(t, c.SetPerm(k, 0x3b000000))
	noErr(t, c.SetTimeout(k, 1))
	e.clock.advance(1200e6)
	steps := []struct {
		what string
		err  error
		want Errno
	}{}
	add := func(what string, err error, want Errno) {
		steps = append(steps, struct {
			what string
			err  error
			want Errno
		}{what, err, want})
	}
	_, err := c.Read(k)
	add("read expired", err, EKEYEXPIRED)
	_, err = c.Search(SessionKeyring, "user", "nr", 0)
	add("search expired", err, EKEYEXPIRED)

	rv := must(c.AddKey("user", "rv", []byte("x"), SessionKeyring))(t)
	noErr(t, c.Revoke(rv))
	_, err = c.Search(SessionKeyring, "user", "rv", 0)
	add("search revoked", err, EKEYREVOKED)
	_, err = c.Read(rv)
	add("read revoked", err, EKEYREVOKED)
	_, err = c.Describe(rv)
	add("describe revoked", err, EKEYREVOKED)
	add("update revoked", c.Update(rv, []byte("y")), EKEYREVOKED)
	_, err = c.AddKey("keyring", "", nil, SessionKeyring)
	add("newring with empty name", err, EINVAL)
	_, err = c.AddKey("user", "", []byte("x"), SessionKeyring)
	add("add with empty description", err, EINVAL)
	_, err = c.AddKey("keyring", ".x", nil, SessionKeyring)
	add("add keyring .x", err, EPERM)
	_, err = c.AddKey(".dead", "x", []byte("y"), SessionKeyring)
	add("add type .dead", err, EPERM)
	_, err = c.AddKey("nosuch", "x", []byte("y"), SessionKeyring)
	add("add unknown type", err, ENODEV)
	add("setperm 0x40000000", c.SetPerm(SessionKeyring, 0x40000000), EINVAL)
	add("link @s into @s", c.Link(SessionKeyring, SessionKeyring), EDEADLK)
	add("unlink a missing key", c.Unlink(12345, SessionKeyring), ENOKEY)
	for _, s := range steps {
		if !errors.Is(s.err, s.want) {
			t.Errorf("%s: %v, kernel said %v", s.what, s.err, s.want)
		}
	}
	// keyctl unlink $revoked @s → success.
	if err := c.Unlink(rv, SessionKeyring); err != nil {
		t.Errorf("unlink revoked: %v, kernel succeeded", err)
	}
}
