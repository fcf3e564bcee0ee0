package keys

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// The "encrypted" key type, as the kernel's: a secret of 20 to 4,096
// random bytes (or one loaded from a blob), which user space only ever
// sees sealed under a master key, a user key ("user:NAME") found in the
// reader's keyrings. Its payload command is one of
//
//	new [FORMAT] user:MASTER LENGTH
//	load [FORMAT] user:MASTER LENGTH HEXBLOB
//	update user:NEWMASTER
//
// with FORMAT default, enc32 (a 32-byte secret) or ecryptfs (a 64-byte
// secret for a key whose description is 16 hexadecimal digits). Reading
// the key gives "FORMAT MASTER LENGTH HEX", the kernel's blob: the secret
// encrypted with AES-CBC under a key derived from the master (SHA-256 of
// "ENC_KEY", a NUL, the master key and a NUL), and an HMAC-SHA256 of the
// whole (keyed with SHA-256 of "AUTH_KEY", a NUL and the master key), so
// that a blob written by the kernel loads here and one written here loads
// in the kernel with the same master key. "trusted:" masters are accepted
// in commands, as the kernel accepts them, but ukeys has no trusted keys
// (they need a TPM): reading or loading such a key fails with ENOKEY.

// Bounds and sizes of the kernel's encrypted keys.
const (
	encMinData     = 20
	encMaxData     = 4096
	encIVSize      = aes.BlockSize
	encHashSize    = sha256.Size
	encEnc32Data   = 32
	encEcryptfsKey = 64  // ECRYPTFS_MAX_KEY_BYTES
	encEcryptfsTok = 740 // sizeof(struct ecryptfs_auth_tok), which the kernel charges for the format
	encFormatDef   = "default"
)

// encMeta is what an encrypted key keeps beside its secret (Payload.Data).
type encMeta struct {
	format  string // default, enc32 or ecryptfs
	master  string // "user:NAME" or "trusted:NAME"
	datalen string // the length as the command wrote it (the blob repeats it)
	iv      [encIVSize]byte
}

var encryptedType = &Type{
	Name:      "encrypted",
	Prepare:   encryptedPrepare,
	ReadAs:    encryptedRead,
	Updatable: true,
	Describe:  describeLen,
	Export:    encryptedExport,
	Import:    encryptedImport,
}

// encryptedExport writes the secret in the clear with what the key keeps
// beside it: a daemon that takes over has no master key to load a blob
// with (the master may not be in any keyring it could search).
func encryptedExport(p *Payload, write func([]byte)) error {
	m, ok := p.Extra.(*encMeta)
	if !ok {
		return EINVAL
	}
	b := make([]byte, 0, 3*binary.MaxVarintLen64+len(m.format)+len(m.master)+len(m.datalen)+encIVSize+len(p.Data))
	for _, f := range []string{m.format, m.master, m.datalen} {
		b = appendEncField(b, f)
	}
	b = append(b, m.iv[:]...)
	b = append(b, p.Data...)
	write(b)
	clear(b)
	return nil
}

// encryptedImport makes the payload encryptedExport wrote, checking it as
// a command would have been checked.
func encryptedImport(desc string, b []byte) (*Payload, int, error) {
	var f [3]string
	for i := range f {
		var ok bool
		if f[i], b, ok = encField(b); !ok {
			return nil, 0, EINVAL
		}
	}
	m := &encMeta{format: f[0], master: f[1], datalen: f[2]}
	if len(b) < encIVSize {
		return nil, 0, EINVAL
	}
	copy(m.iv[:], b)
	secret := b[encIVSize:]
	n, err := strconv.Atoi(m.datalen)
	switch {
	case err != nil || n != len(secret) || n < encMinData || n > encMaxData || !validMaster(m.master, ""):
		return nil, 0, EINVAL
	case m.format == "enc32" && n != encEnc32Data,
		m.format == "ecryptfs" && (n != encEcryptfsKey || !validEcryptfsDesc(desc)),
		m.format != encFormatDef && m.format != "enc32" && m.format != "ecryptfs":
		return nil, 0, EINVAL
	}
	p, charge := newEncPayload(secret, m)
	return p, charge, nil
}

// appendEncField appends one of an encrypted key's fields as its export
// carries it: its length in a byte, then its bytes. None is empty, so
// a zero byte marks a field of 256 bytes or more, whose length follows
// as a uvarint (a master key's name may be as long as a description).
// Streams written before such fields were carried read the same.
func appendEncField(b []byte, f string) []byte {
	if len(f) > 0 && len(f) < 256 {
		b = append(b, byte(len(f)))
	} else {
		b = binary.AppendUvarint(append(b, 0), uint64(len(f)))
	}
	return append(b, f...)
}

// encField reads a field appendEncField wrote, and what follows it.
func encField(b []byte) (f string, rest []byte, ok bool) {
	if len(b) < 1 {
		return "", nil, false
	}
	n, b := uint64(b[0]), b[1:]
	if n == 0 {
		var k int
		if n, k = binary.Uvarint(b); k <= 0 {
			return "", nil, false
		}
		b = b[k:]
	}
	if n > uint64(len(b)) {
		return "", nil, false
	}
	return string(b[:n]), b[n:], true
}

// tokens splits a command at each space or tab, as the kernel's strsep
// does: two separators in a row make an empty token.
type tokens struct {
	rest string
	done bool
}

// next returns the next token; ok is false once the command is used up.
func (t *tokens) next() (tok string, ok bool) {
	if t.done {
		return "", false
	}
	i := strings.IndexAny(t.rest, " \t")
	if i < 0 {
		tok, t.rest, t.done = t.rest, "", true
		return tok, true
	}
	tok, t.rest = t.rest[:i], t.rest[i+1:]
	return tok, true
}

// validMaster checks a master key description: "trusted:" or "user:" and
// a name, of the same kind as orig when orig is not empty.
func validMaster(m, orig string) bool {
	kind, name, ok := strings.Cut(m, ":")
	if !ok || name == "" || kind != "user" && kind != "trusted" {
		return false
	}
	return orig == "" || strings.HasPrefix(orig, kind+":")
}

func encryptedPrepare(c *Caller, desc string, old *Payload, data []byte) (*Payload, int, error) {
	if len(data) == 0 || len(data) > MaxUserPayload {
		return nil, 0, EINVAL
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		data = data[:i] // the kernel reads the command as a C string
	}
	cmd := &tokens{rest: string(data)}
	keyword, _ := cmd.next()
	p, ok := cmd.next()
	if !ok {
		return nil, 0, EINVAL
	}
	format, master := "", p
	switch p {
	case "default", "enc32", "ecryptfs":
		format = p
		if master, ok = cmd.next(); !ok {
			return nil, 0, EINVAL
		}
	}
	if !validMaster(master, "") {
		return nil, 0, EINVAL
	}
	if old != nil {
		// An update names a new master key and nothing else.
		m, _ := old.Extra.(*encMeta)
		if keyword != "update" || m == nil || !validMaster(master, m.master) {
			return nil, 0, EINVAL
		}
		p, charge := newEncPayload(old.Data, &encMeta{format: m.format, master: master, datalen: m.datalen, iv: m.iv})
		return p, charge, nil
	}
	datalen, ok := cmd.next()
	if !ok {
		return nil, 0, EINVAL
	}
	extra, hasExtra := cmd.next()
	switch keyword {
	case "new":
		if hasExtra {
			// Secrets given by user space: the kernel refuses them unless
			// built with CONFIG_USER_DECRYPTED_DATA, as Debian's is not.
			return nil, 0, EINVAL
		}
	case "load":
		if !hasExtra {
			return nil, 0, EINVAL
		}
	default:
		return nil, 0, EINVAL
	}
	n, err := strconv.Atoi(datalen)
	if err != nil || n < encMinData || n > encMaxData {
		return nil, 0, EINVAL
	}
	switch format {
	case "ecryptfs":
		if n != encEcryptfsKey || !validEcryptfsDesc(desc) {
			return nil, 0, EINVAL
		}
	case "enc32":
		if n != encEnc32Data {
			return nil, 0, EINVAL
		}
	}
	m := &encMeta{format: format, master: master, datalen: datalen}
	if format == "" {
		m.format = encFormatDef
	}
	secret := make([]byte, n)
	if keyword == "new" {
		rand.Read(m.iv[:])
		rand.Read(secret)
	} else if err := encLoad(c, m, format != "", extra, secret); err != nil {
		clear(secret)
		return nil, 0, err
	}
	p2, charge := newEncPayload(secret, m)
	clear(secret)
	return p2, charge, nil
}

// validEcryptfsDesc: an ecryptfs key's description is 16 hexadecimal
// digits.
func validEcryptfsDesc(desc string) bool {
	if len(desc) != 16 {
		return false
	}
	_, err := hex.DecodeString(desc)
	return err == nil
}

// newEncPayload makes the payload holding a copy of secret, charged and
// described as the kernel reserves it: the secret (the ecryptfs token
// that holds it, for that format), the blob, the HMAC and a NUL.
func newEncPayload(secret []byte, m *encMeta) (*Payload, int) {
	return newPayloadExtra(secret, m), m.PayloadLen(len(secret))
}

// PayloadLen is an encrypted key's length as the kernel reserves it for a
// secret of n bytes ([Payload.Len]).
func (m *encMeta) PayloadLen(n int) int {
	size := n
	if m.format == "ecryptfs" {
		size = encEcryptfsTok
	}
	return size + encBlobLen(m, n) + encHashSize + 1
}

// encBlob is the part of the blob the HMAC covers, with room for the
// encrypted secret (zero): "FORMAT\0MASTER\0LENGTH\0" IV "\0" DATA.
func encBlob(m *encMeta, n int) []byte {
	b := make([]byte, 0, encBlobLen(m, n))
	b = append(append(b, m.format...), 0)
	b = append(append(b, m.master...), 0)
	b = append(append(b, m.datalen...), 0)
	b = append(append(b, m.iv[:]...), 0)
	return append(b, make([]byte, encPadded(n))...)
}

// encBlobLen is the length of encBlob(m, n).
func encBlobLen(m *encMeta, n int) int {
	return len(m.format) + len(m.master) + len(m.datalen) + 3 + encIVSize + 1 + encPadded(n)
}

func encPadded(n int) int { return (n + aes.BlockSize - 1) / aes.BlockSize * aes.BlockSize }

// encKeys derives the encryption and authentication keys from a master
// key, as the kernel's get_derived_key does: SHA-256 over the label, a
// NUL and the master key, in a buffer sized for the longer label (so the
// shorter one ends in an extra NUL) and of at least 32 bytes.
func encKeys(master []byte) (enc, auth [sha256.Size]byte) {
	n := max(len("AUTH_KEY")+1+len(master), sha256.Size)
	buf := make([]byte, n)
	defer clear(buf)
	for i, label := range []string{"ENC_KEY", "AUTH_KEY"} {
		clear(buf)
		copy(buf, label)
		copy(buf[len(label)+1:], master)
		sum := sha256.Sum256(buf)
		if i == 0 {
			enc = sum
		} else {
			auth = sum
		}
	}
	return enc, auth
}

// masterKey finds the master key in the caller's keyrings, as the
// kernel's request_key of a user key with no callout: its payload's
// bytes, a copy the caller wipes.
func masterKey(c *Caller, master string) ([]byte, error) {
	kind, name, _ := strings.Cut(master, ":")
	if kind != "user" {
		return nil, ENOKEY // a trusted key needs a TPM, which ukeys does not have
	}
	k, err := c.searchFor(userType, name)
	if err != nil {
		if err == errAgain {
			err = ENOKEY
		}
		return nil, err
	}
	defer k.put()
	sec := c.s.dom.Read()
	defer sec.End()
	p := k.loadPayload()
	if p == nil {
		return nil, EKEYREVOKED
	}
	return bytes.Clone(p.Data), nil
}

// encLoad decrypts a blob's hex part into secret after checking its HMAC:
// over the whole blob when the command named the format, from the master
// key's name on when it did not (blobs older than formats).
func encLoad(c *Caller, m *encMeta, withFormat bool, hexblob string, secret []byte) error {
	padded := encPadded(len(secret))
	if len(hexblob) != (encIVSize+1+padded+encHashSize)*2 {
		return EINVAL
	}
	raw := make([]byte, len(hexblob)/2)
	defer clear(raw)
	if _, err := hex.Decode(raw[:encIVSize], []byte(hexblob[:2*encIVSize])); err != nil {
		return EINVAL
	}
	// The byte between the IV and the data is not read, as the kernel
	// does not read it.
	body := []byte(hexblob[2*encIVSize+2:])
	if _, err := hex.Decode(raw[encIVSize+1:], body); err != nil {
		return EINVAL
	}
	copy(m.iv[:], raw[:encIVSize])
	encrypted, mac := raw[encIVSize+1:encIVSize+1+padded], raw[encIVSize+1+padded:]
	master, err := masterKey(c, m.master)
	if err != nil {
		return err
	}
	enc, auth := encKeys(master)
	clear(master)
	defer clear(enc[:])
	defer clear(auth[:])
	blob := encBlob(m, len(secret))
	copy(blob[len(blob)-padded:], encrypted)
	covered := blob
	if !withFormat {
		covered = blob[len(m.format)+1:]
	}
	h := hmac.New(sha256.New, auth[:])
	h.Write(covered)
	if subtle.ConstantTimeCompare(h.Sum(nil), mac) != 1 {
		return EINVAL
	}
	block, err := aes.NewCipher(enc[:])
	if err != nil {
		return EINVAL
	}
	plain := make([]byte, padded)
	defer clear(plain)
	cipher.NewCBCDecrypter(block, m.iv[:]).CryptBlocks(plain, encrypted)
	copy(secret, plain)
	return nil
}

// encryptedRead seals the secret under the master key the reader's
// keyrings hold: the kernel's blob, "FORMAT MASTER LENGTH HEX".
func encryptedRead(c *Caller, p *Payload) ([]byte, error) {
	m, ok := p.Extra.(*encMeta)
	if !ok {
		return nil, EINVAL
	}
	master, err := masterKey(c, m.master)
	if err != nil {
		return nil, err
	}
	enc, auth := encKeys(master)
	clear(master)
	defer clear(enc[:])
	defer clear(auth[:])
	padded := encPadded(len(p.Data))
	plain := make([]byte, padded)
	defer clear(plain)
	copy(plain, p.Data)
	blob := encBlob(m, len(p.Data))
	block, err := aes.NewCipher(enc[:])
	if err != nil {
		return nil, EINVAL
	}
	cipher.NewCBCEncrypter(block, m.iv[:]).CryptBlocks(blob[len(blob)-padded:], plain)
	h := hmac.New(sha256.New, auth[:])
	h.Write(blob)
	mac := h.Sum(nil)
	out := make([]byte, 0, len(m.format)+len(m.master)+len(m.datalen)+3+2*(encIVSize+1+padded+encHashSize))
	out = append(out, m.format+" "+m.master+" "+m.datalen+" "...)
	out = hex.AppendEncode(out, blob[len(blob)-padded-encIVSize-1:])
	out = hex.AppendEncode(out, mac)
	return out, nil
}
