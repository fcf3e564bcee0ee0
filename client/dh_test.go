package client_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

func TestDHCompute(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	c := client.New(server.NewLocal(svc, keys.Cred{UID: 1000, GID: 1000, PID: 79}))
	defer c.Close()
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	add := func(desc string, data []byte) keys.Serial {
		t.Helper()
		id, err := c.AddKey("user", desc, data, keys.SessionKeyring)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// 5^6 mod 23 = 8, with the prime padded to the kernel's minimum of
	// 1536 bits: the result is one 64-bit word.
	prime := make([]byte, 192)
	prime[191] = 23
	p, g, x := add("p", prime), add("g", []byte{5}), add("x", []byte{6})
	got, err := c.DHCompute(x, p, g)
	if err != nil || !bytes.Equal(got, []byte{0, 0, 0, 0, 0, 0, 0, 8}) {
		t.Fatalf("DHCompute = %x, %v", got, err)
	}
	out, err := c.DHComputeKDF(x, p, g, "sha256", []byte("info"), 40)
	if err != nil || len(out) != 40 {
		t.Fatalf("DHComputeKDF = %x, %v", out, err)
	}
	if _, err := c.DHComputeKDF(x, p, g, "nosuch", nil, 40); !errors.Is(err, keys.ENOENT) {
		t.Fatalf("unknown hash: %v", err)
	}
	if _, err := c.DHComputeKDF(x, p, g, "sha256", nil, keys.MaxKDFOutput+1); !errors.Is(err, keys.EMSGSIZE) {
		t.Fatalf("KDF output over the limit: %v", err)
	}
}
