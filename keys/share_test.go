package keys_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/keys/bigkey"
)

// Services whose keys count against shares of one parent are bounded
// each by its own share and together by the parent's; a uid's big_key
// files by its share of its service's; a refusal takes nothing, and
// what destroyed keys held comes back to every share.
func TestShareBoundsServicesTogether(t *testing.T) {
	all := keys.NewShare(nil, keys.ShareLimits{Keys: 10, Bytes: 1 << 20, BigKeyFiles: 3})
	one := keys.NewShare(all, keys.ShareLimits{Keys: 6, Bytes: 1 << 20, BigKeyFiles: 2, BigKeyFilesPerUID: 1})
	two := keys.NewShare(all, keys.ShareLimits{Keys: 6, Bytes: 1 << 20, BigKeyFiles: 2, BigKeyFilesPerUID: 1})
	s1, s2 := keys.New(keys.WithShare(one)), keys.New(keys.WithShare(two))
	defer s1.Close()
	defer s2.Close()
	fill := func(s *keys.Service, uid uint32) (int, error) {
		c := s.NewCaller(keys.Cred{UID: uid, GID: uid, PID: 1})
		defer c.Release() // its process keyring, and the keys in it, go
		for n := 0; ; n++ {
			if _, err := c.AddKey("user", fmt.Sprint("k", n), []byte("v"), keys.ProcessKeyring); err != nil {
				return n, err
			}
		}
	}
	// The process keyring is a key too.
	if n, err := fill(s1, 1000); n != 5 || !errors.Is(err, keys.EDQUOT) {
		t.Fatalf("service one: %d keys, %v", n, err)
	}
	if u := one.Usage(); u.Keys != 6 {
		t.Fatalf("service one's share holds %+v", u)
	}
	c2 := s2.NewCaller(keys.Cred{UID: 1000, GID: 1000, PID: 1})
	big := make([]byte, 2*bigkey.Inline)
	for i, want := range []error{nil, keys.EDQUOT} { // one file a uid
		if _, err := c2.AddKey("big_key", fmt.Sprint("b", i), big, keys.ProcessKeyring); !errors.Is(err, want) && (want != nil || err != nil) {
			t.Fatalf("big key %d of uid 1000 in service two: %v, want %v", i, err, want)
		}
	}
	c3 := s2.NewCaller(keys.Cred{UID: 1001, GID: 1001, PID: 1})
	// Service one's keys are gone (its caller released): room again.
	if err := s1.WaitGC(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c3.AddKey("big_key", "b", big, keys.ProcessKeyring); err != nil {
		t.Fatalf("big key of uid 1001 in service two: %v", err)
	}
	if u := all.Usage(); u.BigKeyFiles != 2 || u.Keys != 4 {
		t.Fatalf("the parent share holds %+v", u)
	}
	c2.Release()
	c3.Release()
	if err := s2.WaitGC(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, sh := range map[string]*keys.Share{"one": one, "two": two, "all": all} {
		if u := sh.Usage(); u != (keys.ShareUsage{}) {
			t.Errorf("share %s holds %+v once every key is gone", name, u)
		}
	}
}

// A service closed with keys in it (its user keyring outlives its
// callers) gives its share back whole once detached: a container's
// namespace ends that way, and the share of every container, and the
// process's bound on big_key files, must not keep what it held.
func TestShareGivenBackAtClose(t *testing.T) {
	files := keys.BigKeyFiles()
	all := keys.NewShare(nil, keys.ShareLimits{Keys: 100, Bytes: 1 << 20, BigKeyFiles: 10})
	sh := keys.NewShare(all, keys.ShareLimits{Keys: 100, Bytes: 1 << 20, BigKeyFiles: 10})
	s := keys.New(keys.WithShare(sh))
	c := s.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	for i := range 3 {
		if _, err := c.AddKey("big_key", fmt.Sprint("b", i), make([]byte, 2*bigkey.Inline), keys.UserKeyring); err != nil {
			t.Fatal(err)
		}
	}
	if u := all.Usage(); u.BigKeyFiles != 3 {
		t.Fatalf("the share holds %+v", u)
	}
	c.Release()
	if err := s.WaitGC(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	sh.Detach()
	if u := all.Usage(); u != (keys.ShareUsage{}) {
		t.Fatalf("the share holds %+v once the service is closed", u)
	}
	if got := keys.BigKeyFiles(); got != files {
		t.Fatalf("the process counts %d big_key files, %d before", got, files)
	}
}
