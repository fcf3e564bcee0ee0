package keys

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// An encrypted key made with "new" reads as a blob sealed under its
// master key; the blob loads into another key with the same secret; an
// update moves it to another master; and every malformed command, a
// missing master or a tampered blob is refused as the kernel refuses it.
func TestEncryptedKeys(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	must(c.AddKey("user", "kmk", bytes.Repeat([]byte{7}, 32), SessionKeyring))(t)
	id := must(c.AddKey("encrypted", "evm", []byte("new user:kmk 32"), SessionKeyring))(t)
	blob := string(must(c.Read(id))(t))
	f := strings.Fields(blob)
	if len(f) != 4 || f[0] != "default" || f[1] != "user:kmk" || f[2] != "32" || len(f[3]) != (16+1+32+32)*2 {
		t.Fatalf("blob %q", blob)
	}
	if again := string(must(c.Read(id))(t)); again != blob {
		t.Fatal("two reads of one key give two blobs")
	}
	if d := must(c.Describe(id))(t); d.Type != "encrypted" {
		t.Fatalf("describe: %+v", d)
	}
	k := e.s.lookup(id)
	if p := k.loadPayload(); p.Len() != 134 {
		t.Fatalf("the key is %d bytes long, want the kernel's 134", p.Len())
	}
	// Loaded into another key, the same secret: the same blob.
	id2 := must(c.AddKey("encrypted", "evm2", []byte("load "+blob), SessionKeyring))(t)
	if got := string(must(c.Read(id2))(t)); got != blob {
		t.Fatalf("loaded key reads %q, want %q", got, blob)
	}
	if !bytes.Equal(e.s.lookup(id2).loadPayload().Data, k.loadPayload().Data) {
		t.Fatal("the loaded secret differs")
	}
	// Without its format the HMAC is taken from the master's name on (as
	// for blobs older than formats), so a blob written with one does not
	// load without it: the kernel refuses it the same way.
	if _, err := c.AddKey("encrypted", "old", []byte("load "+strings.TrimPrefix(blob, "default ")), SessionKeyring); !errors.Is(err, EINVAL) {
		t.Fatalf("a formatted blob loaded without its format: %v, want EINVAL", err)
	}
	// Tampered: refused.
	raw := []byte(f[3])
	raw[40] ^= 1
	if raw[40] == 'g' || raw[40] == ':' { // keep it hexadecimal
		raw[40] = '0'
	}
	if _, err := c.AddKey("encrypted", "bad", []byte("load default user:kmk 32 "+string(raw)), SessionKeyring); !errors.Is(err, EINVAL) {
		t.Fatalf("a tampered blob: %v, want EINVAL", err)
	}
	// Another master: the blob changes, and reads only with that master.
	must(c.AddKey("user", "kmk2", bytes.Repeat([]byte{9}, 32), SessionKeyring))(t)
	must(0, c.Update(id, []byte("update user:kmk2")))(t)
	moved := string(must(c.Read(id))(t))
	if !strings.HasPrefix(moved, "default user:kmk2 32 ") || moved[len("default user:kmk2 32 "):len("default user:kmk2 32 ")+32] != f[3][:32] {
		t.Fatalf("after update: %q", moved)
	}
	for _, bad := range []string{
		"", "new", "new user:kmk", "new user:kmk 19", "new user:kmk 4097", "new bogus:kmk 32",
		"new user: 32", "new  user:kmk 32", "new user:kmk 32 " + strings.Repeat("00", 32),
		"new enc32 user:kmk 33", "new ecryptfs user:kmk 64", "update user:kmk", "frob user:kmk 32",
		"load user:kmk 32", "load user:kmk 32 00",
	} {
		if _, err := c.AddKey("encrypted", "x-"+hex.EncodeToString([]byte(bad)), []byte(bad), SessionKeyring); !errors.Is(err, EINVAL) {
			t.Errorf("%q: %v, want EINVAL", bad, err)
		}
	}
	if err := c.Update(id, []byte("update trusted:kmk")); !errors.Is(err, EINVAL) {
		t.Errorf("update to another kind of master: %v, want EINVAL", err)
	}
	// ecryptfs wants 16 hexadecimal digits for a description, and 64
	// bytes; enc32, 32.
	must(c.AddKey("encrypted", "1000100010001000", []byte("new ecryptfs user:kmk 64"), SessionKeyring))(t)
	must(c.AddKey("encrypted", "e32", []byte("new enc32 user:kmk 32"), SessionKeyring))(t)
	// New keys need no master until they are read: then it must be there.
	nm := must(c.AddKey("encrypted", "nomaster", []byte("new user:nokey 32"), SessionKeyring))(t)
	if _, err := c.Read(nm); !errors.Is(err, ENOKEY) {
		t.Fatalf("read without the master: %v, want ENOKEY", err)
	}
	tm := must(c.AddKey("encrypted", "trusted", []byte("new trusted:kmk 32"), SessionKeyring))(t)
	if _, err := c.Read(tm); !errors.Is(err, ENOKEY) {
		t.Fatalf("read with a trusted master: %v, want ENOKEY", err)
	}
	// add_key on an existing key updates it, and only with "update".
	if _, err := c.AddKey("encrypted", "evm", []byte("new user:kmk 32"), SessionKeyring); !errors.Is(err, EINVAL) {
		t.Fatalf("add_key new over an existing key: %v, want EINVAL", err)
	}
	if got := must(c.AddKey("encrypted", "evm", []byte("update user:kmk"), SessionKeyring))(t); got != id {
		t.Fatalf("add_key update: %d, want %d", got, id)
	}
}

// Whatever the command, preparing never panics, and what it accepts
// without a blob reads back as a blob that loads.
func FuzzEncryptedCommand(f *testing.F) {
	for _, s := range []string{"new user:kmk 32", "new enc32 user:kmk 32", "load user:kmk 32 00", "update user:kmk", "new\tuser:kmk\t20"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e := newEnv(t)
		c := e.caller(1000, 1000)
		must(c.AddKey("user", "kmk", []byte("master"), SessionKeyring))(t)
		id, err := c.AddKey("encrypted", "k", b, SessionKeyring)
		if err != nil {
			return
		}
		blob, err := c.Read(id)
		if err != nil {
			return // a master that is not there
		}
		if _, err := c.AddKey("encrypted", "k2", append([]byte("load "), blob...), SessionKeyring); err != nil {
			t.Fatalf("%q read as %q, which does not load: %v", b, blob, err)
		}
	})
}

// Blobs cross between the kernel and ukeys in both directions: a blob
// the kernel wrote loads here and reads back the same, byte for byte,
// and one written here loads in the kernel and reads back the same.
func TestEncryptedBlobsCrossWithTheKernel(t *testing.T) {
	keyctl, err := exec.LookPath("keyctl")
	if err != nil {
		t.Skip("needs keyutils' keyctl")
	}
	const master = "0123456789abcdef0123456789abcdef" // a user key's 32 bytes
	kernel := func(script string) string {
		t.Helper()
		out, err := exec.Command(keyctl, "session", "-", "sh", "-c",
			"keyctl add user kmk "+master+" @s >/dev/null && "+script).CombinedOutput()
		s := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			s = s[i+1:] // after "Joined session keyring: N"
		}
		if err != nil {
			if strings.Contains(s, "No such device") || strings.Contains(s, "Operation not permitted") {
				t.Skipf("the kernel's encrypted keys are not here: %s", s)
			}
			t.Fatalf("keyctl: %v: %s", err, out)
		}
		return s
	}
	e := newEnv(t)
	c := e.caller(0, 0)
	must(c.AddKey("user", "kmk", []byte(master), SessionKeyring))(t)
	for _, cmd := range []string{"new user:kmk 32", "new enc32 user:kmk 32", "new user:kmk 100"} {
		fromKernel := kernel(`keyctl pipe $(keyctl add encrypted k "` + cmd + `" @s)`)
		id, err := c.AddKey("encrypted", "from-kernel", []byte("load "+fromKernel), SessionKeyring)
		if err != nil {
			t.Fatalf("%s: the kernel's blob does not load here: %v\n%s", cmd, err, fromKernel)
		}
		if got := string(must(c.Read(id))(t)); got != fromKernel {
			t.Fatalf("%s: the kernel's blob reads back here as\n%s\nnot\n%s", cmd, got, fromKernel)
		}
		c.Unlink(id, SessionKeyring)

		mine := string(must(c.Read(must(c.AddKey("encrypted", "mine", []byte(cmd), SessionKeyring))(t)))(t))
		if back := kernel(`keyctl pipe $(keyctl add encrypted k "load ` + mine + `" @s)`); back != mine {
			t.Fatalf("%s: ukeys' blob reads back in the kernel as\n%s\nnot\n%s", cmd, back, mine)
		}
		c.Unlink(must(c.Search(SessionKeyring, "encrypted", "mine", 0))(t), SessionKeyring)
	}
}
