package hardening

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// marker is the payload the secrecy tests hunt for.
var marker = []byte("MARKER-7c41e9a2-payload-must-not-leak")

// A logon key's payload is never readable, by anyone, however its mask is
// set; a revoked key's payload is never readable either.
func TestLogonAndRevokedNeverReadable(t *testing.T) {
	d := startDaemon(t, daemonConfig{})
	c := d.dial(t)
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	logon, err := c.AddKey("logon", "svc:secret", marker, keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetPerm(logon, keys.PermMask); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(logon); !errors.Is(err, keys.EOPNOTSUPP) {
		t.Fatalf("reading a logon key: %v, want EOPNOTSUPP", err)
	}
	revoked := map[string]keys.Serial{}
	for _, typ := range []string{"user", "big_key", "logon"} {
		desc := "r:" + typ
		id, err := c.AddKey(typ, desc, marker, keys.SessionKeyring)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetPerm(id, keys.PermMask); err != nil {
			t.Fatal(err)
		}
		if err := c.Revoke(id); err != nil {
			t.Fatal(err)
		}
		revoked[typ] = id
	}
	var texts = map[string][]byte{}
	read := func(who string, r func(keys.Serial) ([]byte, error)) {
		for typ, id := range revoked {
			b, err := r(id)
			// A revoked logon key reads as any logon key, EOPNOTSUPP: the
			// kernel checks the type's read method before the key's state.
			if typ == "logon" && err != nil {
				continue
			}
			if !errors.Is(err, keys.EKEYREVOKED) {
				t.Errorf("%s reading a revoked %s key: %q, %v", who, typ, b, err)
			}
			texts[who+" "+typ] = b
		}
		b, err := r(logon)
		if err == nil {
			t.Errorf("%s read a logon key: %q", who, b)
		}
		texts[who+" logon"] = b
	}
	read("owner", c.Read)
	if err := c.Update(revoked["user"], []byte("again")); !errors.Is(err, keys.EKEYREVOKED) {
		t.Fatalf("updating a revoked key: %v", err)
	}
	if needRootOK() {
		a := startAgent(t, d, asNobody)
		read("nobody", func(id keys.Serial) ([]byte, error) {
			r := a.one(call{Op: "read", A: int64(id)})
			if r.Errno != 0 {
				if r.Errno == int(keys.EKEYREVOKED) {
					return r.Out, keys.EKEYREVOKED
				}
				return r.Out, errors.New(r.Err)
			}
			return r.Out, nil
		})
	}
	pk, _ := c.ProcKeys()
	texts["proc keys"] = []byte(pk)
	if l := Leaks(marker, texts); l != nil {
		t.Fatalf("the marker payload came back through %v", l)
	}
}

func needRootOK() bool { return os.Geteuid() == 0 }

// Every operation, succeeding and failing, with a marker payload where it
// takes one: the marker appears in no log line (debug level), no error
// string a client sees, and no metric.
func TestNoPayloadInLogsErrorsOrMetrics(t *testing.T) {
	tun := keys.DefaultTunables()
	tun.MaxKeys = 40
	d := startDaemon(t, daemonConfig{tunables: &tun, helper: []string{"/bin/sh", "-c", "echo " + string(marker) + "; exit 3", "helper"}})
	c := d.dial(t)
	var errs []string
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	noteID := func(_ keys.Serial, err error) { note(err) }
	noteB := func(_ []byte, err error) { note(err) }
	noteS := func(_ string, err error) { note(err) }

	noteID(c.JoinSessionKeyring(nil))
	ring, err := c.AddKey("keyring", "ring", nil, keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	var ids []keys.Serial
	for _, typ := range []string{"user", "logon", "big_key"} {
		id, err := c.AddKey(typ, typ+":m", marker, ring)
		note(err)
		ids = append(ids, id)
		noteB(c.Read(id))
		note(c.Update(id, append([]byte("v2-"), marker...)))
		noteS(c.Describe(id))
	}
	big := bytes.Repeat(marker, 2048/len(marker)+1)
	noteID(c.AddKey("big_key", "big", big, ring))
	// Failures carrying the marker.
	noteID(c.AddKey("user", "x", marker, 0x7ffffff0))                       // no such keyring
	noteID(c.AddKey("logon", "nocolon", marker, ring))                      // bad description
	noteID(c.AddKey("nosuchtype", "x", marker, ring))                       // unknown type
	noteID(c.AddKey("user", "huge", bytes.Repeat(marker, 1000), ring))      // too big for user
	note(c.Update(ids[0], bytes.Repeat(marker, 200)))                       // too big for update
	note(c.Update(ring, marker))                                            // keyrings take no payload
	note(c.Instantiate(ids[0], marker, 0))                                  // no authority
	noteID(c.RequestKey("user", "via-helper", marker, keys.SessionKeyring)) // helper prints the marker, fails
	noteID(c.RequestKey("user", "via-helper", marker, keys.SessionKeyring)) // negative now
	for i := 0; i < 50; i++ {                                               // root's quota is large; this only adds
		noteID(c.AddKey("user", "q"+string(rune('a'+i%26))+string(rune('a'+i/26)), marker, ring))
	}
	note(c.Revoke(ids[0]))
	noteB(c.Read(ids[0]))
	note(c.Invalidate(ids[1]))
	noteS(c.ProcKeys())
	noteS(c.ProcKeyUsers())
	noteS(c.Status())

	if needRootOK() {
		// Another uid fails at everything, with the marker in its requests,
		// and floods into its quota.
		a := startAgent(t, d, asNobody)
		for _, r := range a.do(
			call{Op: "read", A: int64(ids[2])},
			call{Op: "update", A: int64(ids[2]), P: marker},
			call{Op: "add", A: int64(ring), S: "user", T: "intrude", P: marker},
			call{Op: "instantiate", A: int64(ids[2]), P: marker},
			call{Op: "join", NilS: true},
			call{Op: "flood", A: int64(keys.SessionKeyring), P: marker},
		) {
			errs = append(errs, r.Err)
		}
	}
	// A malformed frame holding the marker: the daemon closes the
	// connection and must not echo or log the bytes.
	if conn, err := net.Dial("unix", d.path); err == nil {
		wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
		wire.ReadFrame(conn, nil)
		wire.WriteFrame(conn, append([]byte{0, 0, 0, 1, 0x03, 0xe8, 0, 9}, marker...))
		wire.ReadFrame(conn, nil)
		conn.Close()
	}
	d.settle(t)

	texts := map[string][]byte{
		"logs":    d.logs.Bytes(),
		"errors":  []byte(strings.Join(errs, "\n")),
		"metrics": d.metricsText(),
	}
	if l := Leaks(marker, texts); l != nil {
		t.Fatalf("the marker payload leaked into %v", l)
	}
	// The capture is real: the logs saw the failing helper, the metrics
	// the operations, the errors the refusals.
	if !bytes.Contains(texts["logs"], []byte("request-key helper failed")) {
		t.Errorf("logs missed the helper's failure:\n%s", texts["logs"])
	}
	if !bytes.Contains(texts["metrics"], []byte(`op="add_key"`)) {
		t.Error("metrics missed add_key")
	}
	if len(errs) < 10 {
		t.Errorf("only %d errors captured", len(errs))
	}
}
