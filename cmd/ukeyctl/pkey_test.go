package main

import (
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
)

// pkeyScript exercises the asymmetric type, the pkey commands and the
// asymmetric restrictions as a shell script that prints no serial, so
// that the kernel's keyctl and ukeyctl runs compare line for line.
// Files: ca.der (an RSA CA), ca.p8 (its key), leaf.der (a P-256
// certificate the CA signed), self.der (self-signed), h256 and h256bad
// (digests), sig256 (the CA key's signature of h256, made by Go's
// crypto/rsa), data.
const pkeyScript = `
k=$KEYCTL
try() { "$@" >out 2>err; rc=$?; echo "[$rc] $(cat err)"; }
one=$($k newring one @s)
ca=$($k padd asymmetric '' $one <ca.der); echo "padd: $?"
$k rdescribe $ca
try $k read $ca
try $k update $ca data
s=$($k search $one asymmetric id:$TAIL); [ "$s" = "$ca" ] && echo "id: found"
s=$($k search $one asymmetric ex:$SKID); [ "$s" = "$ca" ] && echo "ex: found"
s=$($k search $one asymmetric dn:$SUBJECT); [ "$s" = "$ca" ] && echo "dn: found"
try $k search $one asymmetric id:abc
try $k search $one asymmetric ex:$TAIL
try $k padd asymmetric x @s <data
try $k padd asymmetric x @s </dev/null
$k pkey_query $ca 0
$k pkey_query $ca 0 enc=pkcs1 hash=sha256
try $k pkey_query $ca 0 enc=oaep
try $k pkey_query $ca 0 enc=raw hash=sha256
try $k pkey_query $ca 0 enc=pkcs1 hash=nosuch
try $k pkey_query $ca 1
try $k pkey_query $ca 0 enc
try $k pkey_verify $ca 0 h256 sig256 enc=pkcs1 hash=sha256
try $k pkey_verify $ca 0 h256bad sig256 enc=pkcs1 hash=sha256
try $k pkey_verify $ca 0 h256 sig256
try $k pkey_verify $ca 0 h256 data enc=pkcs1 hash=sha256
try $k pkey_sign $ca 0 h256 enc=pkcs1 hash=sha256
try $k pkey_decrypt $ca 0 sig256 enc=pkcs1
$k pkey_encrypt $ca 0 data enc=pkcs1 >ct; echo "encrypt: $? $(wc -c <ct)"
u=$($k add user u x @s)
try $k pkey_query $u 0
trust=$($k newring trust @s)
$k link $ca $trust
r=$($k newring restricted @s)
try $k restrict_keyring $r asymmetric key_or_keyring:$ca
try $k padd asymmetric '' $r <leaf.der
try $k padd asymmetric '' $r <self.der
try $k link $u $r
r2=$($k newring restricted2 @s)
try $k restrict_keyring $r2 asymmetric key_or_keyring:$trust:chain
try $k padd asymmetric '' $r2 <leaf.der
try $k padd asymmetric '' $r2 <self.der
r3=$($k newring restricted3 @s)
try $k restrict_keyring $r3 asymmetric key_or_keyring:0
try $k restrict_keyring $r3 asymmetric nonsense
try $k restrict_keyring $r3 asymmetric key_or_keyring:1:link
try $k restrict_keyring $r3 asymmetric builtin_trusted
try $k padd asymmetric '' $r3 <self.der
`

// TestPkeyAgainstKernel runs pkeyScript with the kernel's keyctl and
// with ukeyctl against a daemon and compares what each printed. The
// kernel needs the asymmetric type and its X.509 parser (Debian's have
// them; its PKCS#8 parser, and so private-key operations, are missing,
// which the script leaves out: TestPkeyPrivate covers them).
func TestPkeyAgainstKernel(t *testing.T) {
	real := realKeyctl(t)
	if out, err := boundedCommand(t, real, "supports", "public_key").CombinedOutput(); err != nil {
		t.Skipf("the kernel here has no asymmetric keys: %v %s", err, out)
	}
	dir := pkeyFiles(t)
	kernel := runPkeyScript(t, real, dir, "", nil)
	d := startDaemon(t)
	bin := binDir(t, "keyctl", "ukeyctl")
	ukeys := runPkeyScript(t, filepath.Join(bin, "keyctl"), dir, d.path, nil)
	comparePkey(t, "ukeyctl", kernel, ukeys)
	// The kernel's own keyctl under ukeyctl run: its add_key and keyctl
	// calls, the pkey structures among them, served by the daemon.
	wrap := []string{filepath.Join(bin, "ukeyctl"), "run", "--"}
	probe := boundedCommand(t, wrap[0], "run", "--", "true")
	probe.Env = []string{"PATH=/usr/bin:/bin", "UKEYS_SOCKET=" + d.path, "UKEYS_NO_AUTOSTART=1"}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Logf("no ukeyctl run here (%v: %s): the kernel's keyctl is compared only with ukeyctl", err, out)
		return
	}
	comparePkey(t, "keyctl under ukeyctl run", kernel, runPkeyScript(t, real, dir, d.path, wrap))
}

// comparePkey reports the lines where two runs of pkeyScript differ.
func comparePkey(t *testing.T, mode, kernel, ukeys string) {
	t.Helper()
	if kernel != ukeys {
		kl, ul := strings.Split(kernel, "\n"), strings.Split(ukeys, "\n")
		for i := range max(len(kl), len(ul)) {
			var a, b string
			if i < len(kl) {
				a = kl[i]
			}
			if i < len(ul) {
				b = ul[i]
			}
			if a != b {
				t.Errorf("%s, line %d:\n kernel: %s\n ukeys:  %s", mode, i+1, a, b)
			}
		}
	}
}

// pkeyFiles writes the script's files and returns their directory, with
// the CA's ids in the files TAIL, SKID and SUBJECT.
func pkeyFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca := certtest.New(t, certtest.Options{CN: "ukeys test CA", O: "ukeys", CA: true, SKID: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}}, nil)
	leaf := certtest.New(t, certtest.Options{CN: "leaf", Serial: 7, Curve: elliptic.P256()}, ca)
	self := certtest.New(t, certtest.Options{CN: "self", Serial: 9}, nil)
	h := sha256.Sum256([]byte("hello world"))
	bad := h
	bad[0] ^= 1
	sig, err := rsa.SignPKCS1v15(rand.Reader, ca.Key.(*rsa.PrivateKey), crypto.SHA256, h[:])
	if err != nil {
		t.Fatal(err)
	}
	// The subject's content octets (its DER less the SEQUENCE header).
	var subject asn1.RawValue
	if _, err := asn1.Unmarshal(ca.Cert.RawSubject, &subject); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"ca.der": ca.DER, "ca.p8": ca.PKCS8, "leaf.der": leaf.DER, "self.der": self.DER,
		"h256": h[:], "h256bad": bad[:], "sig256": sig, "data": []byte("hello world"),
		"TAIL": []byte("06070809"), "SKID": []byte("010203040506070809"),
		"SUBJECT": []byte(hex.EncodeToString(subject.Bytes)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runPkeyScript runs pkeyScript with the keyctl at prog in a session of
// its own, in dir (against the daemon at socket if not empty), the whole
// under the command wrap if there is one.
func runPkeyScript(t *testing.T, prog, dir, socket string, wrap []string) string {
	t.Helper()
	vars := `KEYCTL=` + shellQuote(prog) + `; TAIL=$(cat TAIL); SKID=$(cat SKID); SUBJECT=$(cat SUBJECT)` + "\n"
	script := filepath.Join(dir, "pkey.sh")
	if err := os.WriteFile(script, []byte(vars+pkeyScript), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{}, wrap...), prog, "session", "-", "/bin/sh", script)
	cmd := boundedCommand(t, argv[0], argv[1:]...)
	cmd.Dir = dir
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LC_ALL=C"}
	if socket != "" {
		env = append(env, "UKEYS_SOCKET="+socket, "UKEYS_NO_AUTOSTART=1", "GORACE=atexit_sleep_ms=0")
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if cmd.hung() {
		t.Fatalf("%s session still running after %v: killed\n%s", prog, commandBound, out)
	}
	if err != nil {
		t.Fatalf("%s session: %v\n%s", prog, err, out)
	}
	// The session's "Joined session keyring: N" line names a serial.
	lines := strings.SplitN(string(out), "\n", 2)
	if strings.HasPrefix(lines[0], "Joined session keyring") && len(lines) == 2 {
		return lines[1]
	}
	return string(out)
}

// TestPkeyPrivate signs and decrypts with a PKCS#8 key through ukeyctl
// (the kernel here has no PKCS#8 parser to compare with): the signature
// verifies with Go's crypto/rsa and with pkey_verify on the certificate,
// and what pkey_encrypt sealed, pkey_decrypt opens.
func TestPkeyPrivate(t *testing.T) {
	d := startDaemon(t)
	d.shell(t)
	dir := pkeyFiles(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	must := func(r result) string {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("exit %d: %s", r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	priv := must(run("keyctl", read("ca.p8"), "padd", "asymmetric", "ca key", "@s"))
	cert := must(run("keyctl", read("ca.der"), "padd", "asymmetric", "", "@s"))
	if q := must(run("keyctl", "", "pkey_query", priv, "0", "enc=pkcs1", "hash=sha256")); !strings.Contains(q, "decrypt=y\nsign=y\nverify=y") {
		t.Errorf("query of the private key:\n%s", q)
	}
	sig := run("keyctl", "", "pkey_sign", priv, "0", file("h256"), "enc=pkcs1", "hash=sha256")
	if sig.Code != 0 || len(sig.Stdout) != 256 {
		t.Fatalf("sign: exit %d, %d bytes: %s", sig.Code, len(sig.Stdout), sig.Stderr)
	}
	h := sha256.Sum256([]byte("hello world"))
	ca := pkeyCA(t, dir)
	if err := rsa.VerifyPKCS1v15(&ca.PublicKey, crypto.SHA256, h[:], []byte(sig.Stdout)); err != nil {
		t.Errorf("crypto/rsa rejects pkey_sign's signature: %v", err)
	}
	if err := os.WriteFile(file("mine"), []byte(sig.Stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	must(run("keyctl", "", "pkey_verify", cert, "0", file("h256"), file("mine"), "enc=pkcs1", "hash=sha256"))
	ct := run("keyctl", "", "pkey_encrypt", cert, "0", file("data"), "enc=pkcs1")
	if ct.Code != 0 {
		t.Fatalf("encrypt: %s", ct.Stderr)
	}
	if err := os.WriteFile(file("ct"), []byte(ct.Stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	if pt := run("keyctl", "", "pkey_decrypt", priv, "0", file("ct"), "enc=pkcs1"); pt.Code != 0 || pt.Stdout != "hello world" {
		t.Errorf("decrypt: exit %d %q %s", pt.Code, pt.Stdout, pt.Stderr)
	}
}

// pkeyCA reads back the CA's private key that pkeyFiles wrote.
func pkeyCA(t *testing.T, dir string) *rsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ca.p8"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS8PrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k.(*rsa.PrivateKey)
}
