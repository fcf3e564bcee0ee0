package keys_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/ukeys/ukeys/keys"
)

// A program keeps a secret in its session keyring, reads it back, and
// revokes it; afterwards it is unreadable at once.
func Example() {
	s := keys.New()
	defer s.Close()

	c := s.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 4242})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		panic(err)
	}

	id, err := c.AddKey("user", "db:password", []byte("hunter2"), keys.SessionKeyring)
	if err != nil {
		panic(err)
	}
	secret, _ := c.Read(id)
	fmt.Printf("%s\n", secret)

	d, _ := c.Describe(id)
	fmt.Println(d)

	_ = c.Revoke(id)
	_, err = c.Read(id)
	errno, _ := keys.ErrnoOf(err)
	fmt.Println(errors.Is(err, keys.EKEYREVOKED), errno)
	// Output:
	// hunter2
	// user;1000;1000;3f010000;db:password
	// true Key has been revoked
}

// A service hands everything it holds to a new one: the state stream
// (Export), read into a new service (Import), whose callers get their
// keyrings back (Restore.Caller) before the restore ends (Done).
func ExampleImport() {
	old := keys.New()
	defer old.Close()
	c := old.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 4242})
	defer c.Release()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		panic(err)
	}
	id, err := c.AddKey("user", "token", []byte("s3cret"), keys.SessionKeyring)
	if err != nil {
		panic(err)
	}

	var stream bytes.Buffer
	if err := old.Export(&stream); err != nil {
		panic(err)
	}
	rs, err := keys.Import(&stream)
	if err != nil {
		panic(err)
	}
	c2, err := rs.Caller(c.State())
	if err != nil {
		panic(err)
	}
	rs.Done()
	defer rs.Service().Close()
	defer c2.Release()

	b, err := c2.Read(id)
	fmt.Printf("%s %v\n", b, err)
	// Output: s3cret <nil>
}
