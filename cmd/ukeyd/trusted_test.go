package main

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keys"
)

// The daemon's -trusted-certs directory fills .builtin_trusted_keys, and
// a file there that is no certificate stops it.
func TestLoadTrusted(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.New(t, certtest.Options{CN: "vendor", CA: true}, nil)
	other := certtest.New(t, certtest.Options{CN: "other", CA: true}, nil)
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.der", ca.DER)
	write("b.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.DER}))
	write("README", []byte("not loaded"))
	svc := keys.New()
	defer svc.Close()
	n, err := loadTrusted(svc, dir)
	if err != nil || n != 2 {
		t.Fatalf("loaded %d: %v", n, err)
	}
	c := svc.NewCaller(keys.Cred{UID: 0, GID: 0, PID: 1})
	defer c.Release()
	if !strings.Contains(c.ProcKeys(), ".builtin_trusted_keys: 2") {
		t.Errorf("/proc/keys:\n%s", c.ProcKeys())
	}
	write("c.crt", []byte("garbage"))
	svc2 := keys.New()
	defer svc2.Close()
	if _, err := loadTrusted(svc2, dir); err == nil || !strings.Contains(err.Error(), "c.crt") {
		t.Errorf("a bad file: %v", err)
	}
}
