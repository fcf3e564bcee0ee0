package keys

import (
	"errors"
	"strings"
	"testing"
)

// FuzzPkeyParams: the parameter string parser accepts exactly the
// kernel's forms, and what it accepts it reads back.
func FuzzPkeyParams(f *testing.F) {
	for _, s := range []string{"", "enc=pkcs1 hash=sha256", "\tenc=raw ", "enc=", "hash=a hash=b", "enc=x962,hash=sha1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePkeyParams(s)
		if err != nil {
			if !errors.Is(err, EINVAL) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if p.Enc == "" || strings.ContainsAny(p.Enc+p.Hash, " \t") {
			t.Fatalf("%q parsed as %+v", s, p)
		}
		if p.Enc != "raw" && !strings.Contains(s, "enc="+p.Enc) || p.Hash != "" && !strings.Contains(s, "hash="+p.Hash) {
			t.Fatalf("%q parsed as %+v", s, p)
		}
	})
}
