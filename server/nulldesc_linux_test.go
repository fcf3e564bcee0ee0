package server_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/certtest"
)

func init() { testChildren["nulldesc"] = nullDescChild }

// nullDescChild makes add_key calls whose description is a NULL pointer
// (and, beside them, an empty string), and says what each answered: the
// kernel takes both for no description, which the asymmetric type
// proposes from the certificate ("CN: skid") and the others refuse.
func nullDescChild() {
	startIntercepted(false)
	der, _ := hex.DecodeString(os.Getenv("UKEYS_TEST_DER"))
	v := []byte("v")
	for _, c := range []struct {
		typ  string
		desc uintptr
		data []byte
		name string
	}{
		{"user", 0, v, "user NULL"},
		{"user", cstr(""), v, `user ""`},
		{"keyring", 0, nil, "keyring NULL"},
		{"asymmetric", 0, der, "asymmetric NULL"},
	} {
		var p, n uintptr
		if len(c.data) > 0 {
			p, n = uintptr(unsafe.Pointer(&c.data[0])), uintptr(len(c.data))
		}
		r, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr(c.typ), c.desc, p, n, uintptr(0xfffffffd), 0) // @s
		if e != 0 {
			fmt.Printf("%s: %v\n", c.name, e)
			continue
		}
		buf := make([]byte, 512)
		m, s := keyctl(unix.KEYCTL_DESCRIBE, uintptr(int32(r)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if m < 0 {
			fmt.Printf("%s: describe: %s\n", c.name, s)
			continue
		}
		fmt.Printf("%s: ok, described %q\n", c.name, buf[:m-1])
	}
}

// add_key's description is optional in the kernel (a NULL pointer is no
// description, as "" is): evmctl imports a certificate with
// add_key("asymmetric", NULL, der, len, ring) and the type names it. An
// intercepted call took the NULL for a bad address (EFAULT).
func TestAddKeyNullDescription(t *testing.T) {
	cert := certtest.New(t, certtest.Options{CN: "nulldesc", SKID: []byte{0xab, 0xcd}}, nil)
	env := "UKEYS_TEST_DER=" + hex.EncodeToString(cert.DER)
	want := "user NULL: invalid argument\n" +
		"user \"\": invalid argument\n" +
		"keyring NULL: invalid argument\n" +
		"asymmetric NULL: ok, described \"asymmetric;0;0;39010000;nulldesc: abcd\"\n"
	if k, ok := runKernel(t, "nulldesc", env); ok && k != want {
		t.Fatalf("the kernel: %q, want %q", k, want)
	}
	if said := runIntercepted(t, "nulldesc", env); said != want {
		t.Fatalf("ukeys: %q, want %q (the kernel's)", said, want)
	}
}
