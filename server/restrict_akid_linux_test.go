package server_test

import (
	"bytes"
	"crypto/elliptic"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/certtest"
	kc "github.com/ukeys/ukeys/keyctl"
)

func init() { testChildren["restrictakid"] = restrictAKIDChild }

// akidOps are the calls restrictAKIDSteps makes: the kernel's (or an
// intercepted program's) system calls, or the Go client's over the
// socket.
type akidOps interface {
	add(typ string, data []byte, ring int32) (int32, error)
	link(id, ring int32) error
	restrict(ring int32, spec string) error
}

// restrictAKIDSteps links certificates whose authority key identifiers
// name their signer in each way X.509 allows into keyrings restricted
// with key_or_keyring (by the CA's key, by a keyring holding it, and the
// chain variants), and prints what each link answered. Every
// certificate is added to an unrestricted keyring first, so that the
// restriction judges it when it is linked, after the add_key's buffer is
// gone (keyutils' keyctl/restrict/valid links its certificates so).
func restrictAKIDSteps(o akidOps, certs map[string][]byte, print func(string)) {
	must := func(id int32, err error) int32 {
		if err != nil {
			panic(fmt.Sprintf("setup: %v", err))
		}
		return id
	}
	const session = -3 // @s
	ring := func(name string) int32 { return must(o.add("keyring:"+name, nil, session)) }
	held := ring("held")
	ids := map[string]int32{}
	for _, name := range akidLeaves {
		ids[name] = must(o.add("asymmetric", certs[name], held))
	}
	trust := ring("trust")
	root := must(o.add("asymmetric", certs["root"], trust))
	restricted := func(name, spec string, first int32) int32 {
		r := ring(name)
		if first != 0 {
			must(0, o.link(first, r))
		}
		must(0, o.restrict(r, spec))
		return r
	}
	for _, r := range []struct {
		name string
		ring int32
	}{
		{"by key", restricted("by key", fmt.Sprintf("key_or_keyring:%d", root), 0)},
		{"by keyring", restricted("by keyring", fmt.Sprintf("key_or_keyring:%d", trust), 0)},
		{"chain", restricted("chain", "key_or_keyring:0:chain", root)},
	} {
		for _, name := range akidLeaves {
			if name == "intleaf" || name == "inter" {
				continue
			}
			print(fmt.Sprintf("%s, %s: %s", r.name, name, errName(o.link(ids[name], r.ring))))
		}
	}
	// key_or_keyring:RING:chain: a certificate its intermediate signed
	// only once the intermediate is linked in.
	rc := restricted("keyring chain", fmt.Sprintf("key_or_keyring:%d:chain", trust), 0)
	for _, name := range []string{"intleaf", "inter", "intleaf"} {
		print(fmt.Sprintf("keyring chain, %s: %s", name, errName(o.link(ids[name], rc))))
	}
}

// akidLeaves are the certificates linked, by name: a root CA signed
// them, naming it in their authority key identifiers by its key id, its
// certificate's issuer and serial number, or both, or naming another
// serial or key id; "tampered" names the root in full and was altered
// after the root signed it; "inter" is an intermediate CA the root
// signed, "intleaf" a certificate the intermediate signed.
var akidLeaves = []string{"full", "keyid", "issuer+serial", "other serial", "other keyid", "tampered", "inter", "intleaf"}

// akidCerts makes them, and the root.
func akidCerts(t *testing.T) map[string][]byte {
	// The signers are RSA keys, which every kernel with the asymmetric
	// type can check (ECDSA needs its module); the leaves, whose keys
	// check nothing, are P-256 ones, quicker to make.
	p256 := elliptic.P256()
	root := certtest.New(t, certtest.Options{CN: "AKID root", O: "ukeys", CA: true, Serial: 0x8a11, Bits: 1024,
		SKID: []byte{0x0a, 0x11, 0x0a, 0x11}, SelfAKID: true}, nil)
	akid := func(edit func(*certtest.AKID)) *certtest.AKID {
		a := root.AKID()
		if edit != nil {
			edit(a)
		}
		return a
	}
	leaf := func(serial int64, a *certtest.AKID) []byte {
		return certtest.New(t, certtest.Options{CN: fmt.Sprintf("leaf %d", serial), Serial: serial, Curve: p256, AKID: a}, root).DER
	}
	inter := certtest.New(t, certtest.Options{CN: "AKID intermediate", CA: true, Serial: 0x20, Bits: 1024,
		SKID: []byte{0x1e, 0x1e}, AKID: root.AKID()}, root)
	// A certificate the root signed, altered after: its subject's CN.
	tampered := certtest.New(t, certtest.Options{CN: "tampered", Serial: 0x15, Curve: p256, AKID: root.AKID()}, root).DER
	i := bytes.Index(tampered, []byte("tampered"))
	tampered[i] = 'T'
	return map[string][]byte{
		"root":          root.DER,
		"full":          leaf(0x10, akid(nil)),
		"keyid":         leaf(0x11, akid(func(a *certtest.AKID) { a.Issuer, a.Serial = nil, nil })),
		"issuer+serial": leaf(0x12, akid(func(a *certtest.AKID) { a.KeyID = nil })),
		"other serial":  leaf(0x13, akid(func(a *certtest.AKID) { a.Serial = big.NewInt(0x8a12) })),
		"other keyid":   leaf(0x14, akid(func(a *certtest.AKID) { a.KeyID = []byte{0x0a, 0x11, 0x0a, 0x12} })),
		"tampered":      tampered,
		"inter":         inter.DER,
		"intleaf":       certtest.New(t, certtest.Options{CN: "leaf of the intermediate", Serial: 0x21, Curve: p256, AKID: inter.AKID()}, inter).DER,
	}
}

// restrictAKIDWant is what the kernel answers (Linux 6.18): a signer is
// found by whichever ids the certificate gives, and must match all of
// them; one that names another serial or key id finds none (ENOKEY,
// find_asymmetric_key's EKEYREJECTED is not passed on); a signature that
// does not verify is EKEYREJECTED.
var restrictAKIDWant = func() string {
	var b strings.Builder
	for _, r := range []string{"by key", "by keyring", "chain"} {
		for _, l := range []struct{ name, want string }{
			{"full", "ok"}, {"keyid", "ok"}, {"issuer+serial", "ok"},
			{"other serial", "ENOKEY"}, {"other keyid", "ENOKEY"}, {"tampered", "EKEYREJECTED"},
		} {
			fmt.Fprintf(&b, "%s, %s: %s\n", r, l.name, l.want)
		}
	}
	b.WriteString("keyring chain, intleaf: ENOKEY\nkeyring chain, inter: ok\nkeyring chain, intleaf: ok\n")
	return b.String()
}()

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	var k kc.Errno
	if errors.As(err, &k) {
		return unix.ErrnoName(unix.Errno(k))
	}
	return err.Error()
}

// sysOps are the system calls: the kernel's, or intercepted.
type sysOps struct{}

func (sysOps) add(typ string, data []byte, ring int32) (int32, error) {
	desc := ""
	if name, ok := strings.CutPrefix(typ, "keyring:"); ok {
		typ, desc = "keyring", name
	}
	id, err := unix.AddKey(typ, desc, data, int(ring))
	return int32(id), err
}

func (sysOps) link(id, ring int32) error {
	_, err := unix.KeyctlInt(unix.KEYCTL_LINK, int(id), int(ring), 0, 0)
	return err
}

func (sysOps) restrict(ring int32, spec string) error {
	return unix.KeyctlRestrictKeyring(int(ring), "asymmetric", spec)
}

func restrictAKIDChild() {
	startIntercepted(false)
	certs := map[string][]byte{}
	for _, kv := range strings.Split(os.Getenv("UKEYS_TEST_CERTS"), ",") {
		name, h, _ := strings.Cut(kv, "=")
		certs[name], _ = hex.DecodeString(h)
	}
	restrictAKIDSteps(sysOps{}, certs, func(s string) { fmt.Println(s) })
}

// clientOps are the Go client's calls over the socket.
type clientOps struct{ c *client.Client }

func (o clientOps) add(typ string, data []byte, ring int32) (int32, error) {
	desc := ""
	if name, ok := strings.CutPrefix(typ, "keyring:"); ok {
		typ, desc = "keyring", name
	}
	id, err := o.c.AddKey(typ, desc, data, kc.Serial(ring))
	return int32(id), err
}

func (o clientOps) link(id, ring int32) error {
	return o.c.Link(kc.Serial(id), kc.Serial(ring))
}

func (o clientOps) restrict(ring int32, spec string) error {
	typ := "asymmetric"
	return o.c.RestrictKeyring(kc.Serial(ring), &typ, &spec)
}

// A certificate linked into a keyring restricted by key_or_keyring is
// judged by the signer its authority key identifier names, found and
// checked as the kernel's restrict_link_by_key_or_keyring(_chain) does,
// whichever of the key id, the issuer's name and serial, or both it
// gives; the kernel, ukeys through the socket and ukeys intercepting
// answer alike. keyutils' keyctl/restrict/valid failed on both of
// ukeys' ways in: a certificate's signature was checked against the
// request's buffer it had been parsed from, wiped by the time the
// certificate was linked (EKEYREJECTED, and ENOKEY for what the
// rejected intermediate signed).
func TestRestrictionFindsTheSignerByAKID(t *testing.T) {
	certs := akidCerts(t)
	var env []string
	for name, der := range certs {
		env = append(env, name+"="+hex.EncodeToString(der))
	}
	certEnv := "UKEYS_TEST_CERTS=" + strings.Join(env, ",")
	if k, ok := runKernel(t, "restrictakid", certEnv); ok && k != restrictAKIDWant {
		t.Fatalf("the kernel:\n%s\nwant:\n%s", k, restrictAKIDWant)
	}
	d := startDaemon(t)
	c := d.dial(t)
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	restrictAKIDSteps(clientOps{c}, certs, func(s string) { b.WriteString(s + "\n") })
	if got := b.String(); got != restrictAKIDWant {
		t.Errorf("ukeys through the socket:\n%s\nwant (the kernel's):\n%s", got, restrictAKIDWant)
	}
	if said := runIntercepted(t, "restrictakid", certEnv); said != restrictAKIDWant {
		t.Errorf("ukeys intercepting:\n%s\nwant (the kernel's):\n%s", said, restrictAKIDWant)
	}
}
