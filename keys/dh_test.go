package keys

import (
	"bytes"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
	"time"
)

// Known answers computed outside Go: the prime from RFC 3526's formula
// (2^2048 - 2^1984 - 1 + 2^64 * ([2^1918 pi] + 124476)) with mpmath, the
// powers with Python's pow and the KDF blocks with Python's hashlib.
const (
	modp2048 = "ffffffffffffffffc90fdaa22168c234c4c6628b80dc1cd129024e088a67cc74020bbea63b139b22514a08798e3404ddef9519b3cd3a431b302b0a6df25f14374fe1356d6d51c245e485b576625e7ec6f44c42e9a637ed6b0bff5cb6f406b7edee386bfb5a899fa5ae9f24117c4b1fe649286651ece45b3dc2007cb8a163bf0598da48361c55d39a69163fa8fd24cf5f83655d23dca3ad961c62f356208552bb9ed529077096966d670c354e4abc9804f1746c08ca18217c32905e462e36ce3be39e772c180e86039b2783a2ec07a28fb5c55df06f4c52c9de2bcbf6955817183995497cea956ae515d2261898fa051015728e5a8aacaa68ffffffffffffffff"
	dhPrivA  = "6f2a9d1c4b3e5a7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"
	dhPrivB  = "1c3e5a7f9b2d4f6a8c0e1f3a5b7c9d2e4f6a8b0c1d3e5f7a9b2c4d6e8f0a1b3c"
	// 2^a mod p
	dhPubA = "d69c0efcf24c81f0df4f6d4c19ee3a00615f7ac25123d98c946c0830d60740cf4a2a2fdfde1d29d7909560dee01a7fa56cca83aa6df2863b3a0cc4bad6a75c4f157a0975692e87d9d76aa9163a48181db898a4012f6f652eeca93dee17f267f8da6c8006a80a147d00569b342e5209e84062ebf323e0304399ba4a97b77fe41633ac722a68ddcd2bff1fdf412b9472d827b6784e0af3d517e15018b658ef58ea29af78ccd771ccc0a2faf67b89f5a812d79ce89455a78189d33c18010f0ef1327c8d9a68bd0b1d3b6818e4d1abb46a99f14280441043978390dd31436c38a2d1d409118b178a84c7b73becdd26b4548e86089d25cb6b8429c04f4cb2cb75f437"
	// (2^b)^a mod p
	dhShared = "9e9b52605d0903d8c5356e910d6a3993bdbdd8f4f02be75fab9d5f340279ca82a78de94455d152d46f8608ca180d15c14ccbb63002790dea45b3250911a0790af935636f9a2d029b6049e90b29f8ff8f75cdac75929d6ae708ab0df780cc3d47044406f62c0f7e12ef059291c635b0feb0f85caddeb30bbeb5a22828870f871ac2fa0eac877fd66316b6f777251bc5051731f28b45d02e6ec296b1b83e659a88e02894eaba963afb1c371c257fbc734a616ad58223eb6d83c968147382d7c42382fe1231976d6ec8d207e97e5da6e4537f69176f7eb846cb673607f208ee76e617f99f7a273b904ce77933123112eca592c539306b4621e9f4fb4cdbdc6e3b8b"
	// counter KDF over the shared secret (OtherInfo 0x40..0x53 where used)
	kdfSHA256Len32      = "474d7339517f05a60252e73b9d16d0208a8671255dbf03ce877bc9aae51386f6"
	kdfSHA256Len100OI   = "cd70be854df8cd9a5f1a69e92368cf9aa4b936eb16ed88cfbc0836751916e5084de02758293e91c518a6794fe880ce30e7fb2a28254041c4cd20a84a3ca67cd53d165569d2497481cd20848315456d855792e5b2daaf1fc38943e88986dbc900d8baddac"
	kdfSHA3512Len70OI   = "1ff988a896040d2f26c85d03052f255472ba8b69a1ba12709efcf6d910a354d5d5a28f13e5e81d59a874695fe1f829e58f962be02d7430d02d7255cf95c64902d29bf6f4dc97"
	kdfSHA1Len5         = "c93ab3af1e"
	oddPrimeResult      = "00000000000000314fc25f1299f994501b9b4e3e675b308f74fbd7c843e4e2cc6913972a7d45188e3c8c8d87d36d274d6f55b8040079fb70b5886969f17d4ce348bdd6fa5d80b808f796ff3a4e1df44a23c2659eb60c39fb7a4fedaa98ee65e9d691f870b57abe3c035b8cbdeb621c5e56ff8a7e5c895a09d1d8a3c98a1c60788b06f7d14b86a3b25d04d0b5441d31d428ac6a5a12a286444600fd0c426f551459fa1edf58675a79115a9906410670e378d985cd34d28647fa30f6fae8b87bd8debd907c5b877358"
	oddPrimeSignificant = 193
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// padded returns v as a big-endian number of n bytes.
func padded(v int64, n int) []byte {
	return big.NewInt(v).FillBytes(make([]byte, n))
}

// oddPrime is a 193-byte modulus (not a prime: the kernel does not check)
// whose result the kernel rounds up to 200 bytes.
func oddPrime() []byte {
	b := bytes.Repeat([]byte{0x5a}, oddPrimeSignificant)
	b[0], b[len(b)-1] = 0xc3, 0xe7
	return b
}

func TestDHModp2048IsTheRFCPrime(t *testing.T) {
	p := new(big.Int).SetBytes(unhex(t, modp2048))
	if p.BitLen() != 2048 || !p.ProbablyPrime(20) {
		t.Fatalf("modp2048: %d bits, prime %v", p.BitLen(), p.ProbablyPrime(20))
	}
	// The group is safe-prime: (p-1)/2 is prime too.
	q := new(big.Int).Rsh(p, 1)
	if !q.ProbablyPrime(20) {
		t.Fatal("(p-1)/2 is not prime")
	}
}

func TestDHComputeKnownAnswers(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	add := func(desc string, data []byte) Serial {
		t.Helper()
		return must(c.AddKey("user", desc, data, SessionKeyring))(t)
	}
	prime := add("prime", unhex(t, modp2048))
	gen := add("gen", []byte{2})
	privA := add("a", unhex(t, dhPrivA))
	privB := add("b", unhex(t, dhPrivB))
	pubA := add("A", unhex(t, dhPubA))
	small := add("small-prime", padded(23, 192))
	five := add("five", []byte{5})
	six := add("six", []byte{6})
	zero := add("zero-exp", []byte{0})
	one := add("one-mod", padded(1, 192))
	odd := add("odd-prime", oddPrime())
	seven := add("seven", []byte{7})
	f4 := add("f4", []byte{0x01, 0x00, 0x01})
	oi := make([]byte, 20)
	for i := range oi {
		oi[i] = byte(0x40 + i)
	}

	cases := []struct {
		name   string
		p      DHParams
		buflen uint64
		kdf    *KDFParams
		want   string
	}{
		{"public value 2^a", DHParams{privA, prime, gen}, 256, nil, dhPubA},
		{"buffer larger than needed", DHParams{privA, prime, gen}, 10000, nil, dhPubA},
		{"shared secret (2^a)^b", DHParams{privB, prime, pubA}, 256, nil, dhShared},
		{"small numbers, padded to one 64-bit word", DHParams{six, small, five}, 8, nil, "0000000000000008"},
		{"exponent zero", DHParams{zero, small, five}, 8, nil, "0000000000000001"},
		{"modulus one", DHParams{six, one, five}, 8, nil, "0000000000000000"},
		{"193-byte modulus rounds up to 200 bytes", DHParams{f4, odd, seven}, 200, nil, oddPrimeResult},
		{"kdf sha256 32 bytes", DHParams{privB, prime, pubA}, 32, &KDFParams{Hash: "sha256"}, kdfSHA256Len32},
		{"kdf sha256 100 bytes with otherinfo", DHParams{privB, prime, pubA}, 100, &KDFParams{Hash: "sha256", OtherInfo: oi}, kdfSHA256Len100OI},
		{"kdf sha3-512 70 bytes with otherinfo", DHParams{privB, prime, pubA}, 70, &KDFParams{Hash: "sha3-512", OtherInfo: oi}, kdfSHA3512Len70OI},
		{"kdf sha1 5 bytes", DHParams{privB, prime, pubA}, 5, &KDFParams{Hash: "sha1"}, kdfSHA1Len5},
		{"kdf of no bytes", DHParams{privB, prime, pubA}, 0, &KDFParams{Hash: "sha256"}, ""},
		{"keyed hash, no bytes asked", DHParams{privB, prime, pubA}, 0, &KDFParams{Hash: "hmac(sha256)"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, got, err := c.DHCompute(tc.p, tc.buflen, tc.kdf)
			if err != nil {
				t.Fatal(err)
			}
			if h := hex.EncodeToString(got); h != tc.want || n != len(got) {
				t.Fatalf("got %d bytes %s\nwant %s", n, h, tc.want)
			}
		})
	}

	t.Run("length query", func(t *testing.T) {
		for _, q := range []struct {
			p    DHParams
			want int
		}{{DHParams{privA, prime, gen}, 256}, {DHParams{six, small, five}, 8}, {DHParams{f4, odd, seven}, 200}} {
			n, got, err := c.DHCompute(q.p, 0, nil)
			if err != nil || n != q.want || got != nil {
				t.Fatalf("DHCompute(buflen 0) = %d, %x, %v; want %d, no bytes", n, got, err, q.want)
			}
		}
	})
	t.Run("both sides agree", func(t *testing.T) {
		_, pubB, err := c.DHCompute(DHParams{privB, prime, gen}, 256, nil)
		if err != nil {
			t.Fatal(err)
		}
		idB := add("B", pubB)
		_, s1, err := c.DHCompute(DHParams{privA, prime, idB}, 256, nil)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(s1) != dhShared {
			t.Fatalf("(2^b)^a = %x, want the shared secret", s1)
		}
	})
}

func TestDHComputeErrors(t *testing.T) {
	e := newEnv(t)
	c := e.caller(1000, 1000)
	other := e.caller(2000, 2000)
	add := func(typ, desc string, data []byte) Serial {
		t.Helper()
		return must(c.AddKey(typ, desc, data, SessionKeyring))(t)
	}
	prime := add("user", "prime", unhex(t, modp2048))
	gen := add("user", "gen", []byte{2})
	priv := add("user", "priv", unhex(t, dhPrivA))
	logonDefault := add("logon", "svc:default", unhex(t, modp2048))
	logon := add("logon", "svc:prime", unhex(t, modp2048))
	noErr(t, c.SetPerm(logon, 0x3f010000)) // readable, though logon has no read
	ring := add("keyring", "ring", nil)
	revoked := add("user", "revoked", []byte{2})
	noErr(t, c.Revoke(revoked))
	expired := add("user", "expired", []byte{2})
	noErr(t, c.SetTimeout(expired, 1))
	e.clock.advance(2 * time.Second)
	unreadable := add("user", "unreadable", []byte{2})
	noErr(t, c.SetPerm(unreadable, 0x3d010000)) // possessor: all but read
	foreign := must(other.AddKey("user", "theirs", []byte{2}, SessionKeyring))(t)
	zeroPrime := add("user", "zero-prime", make([]byte, 256))
	shortPrime := add("user", "short-prime", padded(23, 191))
	smallPrime := add("user", "small-prime", padded(23, 192))
	long := add("user", "long", bytes.Repeat([]byte{1}, 193))
	hugePrime := add("user", "huge-prime", bytes.Repeat([]byte{0xff}, 2049))
	hugeBase := add("user", "huge-base", bytes.Repeat([]byte{0x01}, 2049))
	const missing Serial = 0x3fffffff

	cases := []struct {
		name   string
		p      DHParams
		buflen uint64
		kdf    *KDFParams
		want   Errno
	}{
		{"prime missing", DHParams{priv, missing, gen}, 256, nil, ENOKEY},
		{"base revoked", DHParams{priv, prime, revoked}, 256, nil, ENOKEY},
		{"base expired", DHParams{priv, prime, expired}, 256, nil, ENOKEY},
		{"base without read permission", DHParams{priv, prime, unreadable}, 256, nil, ENOKEY},
		{"base of another user", DHParams{priv, prime, foreign}, 256, nil, ENOKEY},
		{"special id with no keyring", DHParams{priv, prime, ThreadKeyring}, 256, nil, ENOKEY},
		{"logon key, default permissions (no read)", DHParams{priv, logonDefault, gen}, 256, nil, ENOKEY},
		{"prime is a logon key", DHParams{priv, logon, gen}, 256, nil, EOPNOTSUPP},
		{"base is a keyring", DHParams{priv, prime, ring}, 256, nil, EOPNOTSUPP},
		{"prime checked before base", DHParams{priv, missing, ring}, 256, nil, ENOKEY},
		{"base checked before private", DHParams{missing, prime, ring}, 256, nil, EOPNOTSUPP},
		{"keys checked before the numbers", DHParams{missing, zeroPrime, gen}, 256, nil, ENOKEY},
		{"zero prime", DHParams{priv, zeroPrime, gen}, 256, nil, EINVAL},
		{"prime under 1536 bits", DHParams{priv, shortPrime, gen}, 256, nil, EINVAL},
		{"base longer than prime", DHParams{priv, smallPrime, long}, 256, nil, EINVAL},
		{"private longer than prime", DHParams{long, smallPrime, gen}, 256, nil, EINVAL},
		{"prime over 16384 bits", DHParams{priv, hugePrime, gen}, 4096, nil, EINVAL},
		{"base over 16384 bits", DHParams{priv, hugePrime, hugeBase}, 4096, nil, EINVAL},
		{"buffer too small", DHParams{priv, prime, gen}, 255, nil, EOVERFLOW},
		{"small result, buffer too small", DHParams{priv, smallPrime, gen}, 7, nil, EOVERFLOW},
		{"kdf output over 1024", DHParams{priv, prime, gen}, 1025, &KDFParams{Hash: "sha256"}, EMSGSIZE},
		{"kdf otherinfo over 64", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: "sha256", OtherInfo: make([]byte, 65)}, EMSGSIZE},
		{"kdf unknown hash", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: "nosuch"}, ENOENT},
		{"kdf empty hash name", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: ""}, ENOENT},
		{"kdf hmac of an unknown hash", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: "hmac(nosuch)"}, ENOENT},
		{"kdf hash name over 127 bytes", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: strings.Repeat("s", 128)}, EINVAL},
		{"kdf checks come before the keys", DHParams{missing, missing, missing}, 32, &KDFParams{Hash: "nosuch"}, ENOENT},
		{"kdf keyed hash without a key", DHParams{priv, prime, gen}, 32, &KDFParams{Hash: "hmac(sha256)"}, ENOKEY},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, out, err := c.DHCompute(tc.p, tc.buflen, tc.kdf)
			wantErr(t, tc.name, err, tc.want)
			if n != 0 || out != nil {
				t.Fatalf("failed call returned %d, %x", n, out)
			}
		})
	}
	// A hash name of 127 bytes is within the kernel's limit: unknown, not
	// too long.
	_, _, err := c.DHCompute(DHParams{priv, prime, gen}, 32, &KDFParams{Hash: strings.Repeat("s", 127)})
	wantErr(t, "127-byte hash name", err, ENOENT)
	// The kdf's output length is not limited by the prime: 1024 works.
	if n, out, err := c.DHCompute(DHParams{priv, prime, gen}, MaxKDFOutput, &KDFParams{Hash: "sha512", OtherInfo: make([]byte, MaxKDFOtherInfo)}); err != nil || n != MaxKDFOutput || len(out) != MaxKDFOutput {
		t.Fatalf("kdf at the limits: %d bytes, %v", n, err)
	}
}

// TestKDFCounterBlocks checks the KDF against its definition block by
// block, with Go's own digests: each block is H(counter || z || info).
func TestKDFCounterBlocks(t *testing.T) {
	z := []byte("shared secret")
	info := []byte("info")
	for _, name := range dhHashNames {
		h, ok := dhHashNamed(name)
		if !ok {
			t.Fatalf("%s: not known", name)
		}
		got := kdfCounter(h, uint64(2*h.size+3), z, info)
		var want []byte
		for i := byte(1); i <= 3; i++ {
			d := h.new()
			d.Write([]byte{0, 0, 0, i})
			d.Write(z)
			d.Write(info)
			want = d.Sum(want)
		}
		if !bytes.Equal(got, want[:2*h.size+3]) || h.new().Size() != h.size {
			t.Errorf("%s: kdf blocks differ", name)
		}
	}
}
