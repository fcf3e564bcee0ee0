package bigkey

import (
	"bytes"
	"os"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/keys"
)

func isZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// A big_key too large to keep in memory is sealed in an unlinked file;
// destruction forgets its key and overwrites the file.
func TestBigKeyFileWiped(t *testing.T) {
	s := newService(t)
	c := caller(t, s, 1000, 100)
	secret := bytes.Repeat([]byte("big-wipe-marker-"), 4096/16)
	var id keys.Serial
	sl := sealedBy(t, func() { id = must(c.AddKey("big_key", "big", secret, keys.SessionKeyring))(t) })
	// A second descriptor on the same file outlives the key's own.
	fd, err := syscall.Dup(int(sl.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "big_key copy")
	defer f.Close()
	sealedKey := sl.key[:]
	if err := c.Unlink(id, keys.SessionKeyring); err != nil {
		t.Fatal(err)
	}
	settle(t, s)
	if !isZero(sealedKey) {
		t.Fatal("the file's encryption key survived destruction")
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, st.Size())
	if _, err := f.ReadAt(rest, 0); err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 || !isZero(rest) {
		t.Fatalf("the sealed file (%d bytes) was not overwritten", st.Size())
	}
}

// A big_key still held when the service closes (in a user keyring,
// which outlives its callers: an agent's container namespace ends so,
// with its last process) has its file overwritten and closed, and given
// back to its share, once a grace period has passed.
func TestHeldFileWipedAtClose(t *testing.T) {
	sh := keys.NewShare(nil, keys.ShareLimits{Keys: 100, Bytes: 1 << 20, BigKeyFiles: 10})
	s := keys.New(keys.WithShare(sh))
	c := s.NewCaller(keys.Cred{UID: 1000, GID: 100, PID: 4242})
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("big-close-marker"), 4096/16)
	sl := sealedBy(t, func() { must(c.AddKey("big_key", "big", big, keys.UserKeyring))(t) })
	if u := sh.Usage(); u.BigKeyFiles != 1 {
		t.Fatalf("the share counts %d big_key files, want 1", u.BigKeyFiles)
	}
	fd, err := syscall.Dup(int(sl.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "big_key copy")
	defer f.Close()
	sealedKey := sl.key[:]
	c.Release()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !isZero(sealedKey) {
		t.Error("the big_key file's encryption key survived Close")
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, st.Size())
	if _, err := f.ReadAt(rest, 0); err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 || !isZero(rest) {
		t.Errorf("the big_key file (%d bytes) was not overwritten at Close", st.Size())
	}
	if u := sh.Usage(); u.BigKeyFiles != 0 {
		t.Errorf("the share still counts %d big_key files once they are closed", u.BigKeyFiles)
	}
	sh.Detach()
}

// A sealed big_key is decrypted for each read into a buffer of its own;
// once the read has copied it out, that buffer is wiped, by the general
// read and by the fast path (and by a read whose buffer was too small,
// which only learns the length). The plaintext once stayed in the
// daemon's heap after every read, and after the key was destroyed (an
// audit found six copies of a 2 KiB payload read three times).
func TestSealedBigKeyReadsLeaveNoPlaintext(t *testing.T) {
	orig := bigKeyType.Read
	var decrypted [][]byte
	bigKeyType.Read = func(p *keys.Payload) ([]byte, error) {
		b, err := orig(p)
		if _, ok := p.Extra.(*sealed); ok && err == nil {
			decrypted = append(decrypted, b)
		}
		return b, err
	}
	defer func() { bigKeyType.Read = orig }()
	s := newService(t)
	c := caller(t, s, 1000, 100)
	secret := bytes.Repeat([]byte("sealed-bigkey-plaintext-"), 4096/24)
	id := must(c.AddKey("big_key", "big", secret, keys.SessionKeyring))(t)
	if got := must(c.Read(id))(t); !bytes.Equal(got, secret) {
		t.Fatal("the big_key reads back wrong")
	}
	if n, err := c.ReadInto(id, make([]byte, 8)); err != nil || n != len(secret) {
		t.Fatalf("a read into too small a buffer: %d, %v", n, err)
	}
	dst := make([]byte, len(secret))
	if n, err := c.ReadInto(id, dst); err != nil || n != len(secret) || !bytes.Equal(dst, secret) {
		t.Fatalf("a read into a buffer that fits: %d, %v", n, err)
	}
	if len(decrypted) < 3 {
		t.Fatalf("%d decryptions seen for three reads", len(decrypted))
	}
	for i, b := range decrypted {
		if bytes.Contains(b, secret[:64]) {
			t.Errorf("decrypted copy %d (%d bytes) still holds the plaintext after its read returned", i, len(b))
		}
	}
}
