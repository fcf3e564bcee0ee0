package server_test

import (
	"os"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// sampleRequest is a well-formed request for s: the session keyring for
// every integer, "user" for every string, a short payload for every
// buffer.
func sampleRequest(t testing.TB, s *wire.Spec) *wire.Request {
	vals := make([]wire.Value, len(s.Args))
	for i, a := range s.Args {
		switch a.Kind {
		case wire.KindInt:
			vals[i] = wire.Int(keys.SessionKeyring)
		case wire.KindStr, wire.KindOptStr:
			vals[i] = wire.Str("user")
		case wire.KindBytes:
			vals[i] = wire.Bytes([]byte("v"))
		}
	}
	var r wire.Request
	if err := r.Set(s.Op, vals...); err != nil {
		t.Fatal(err)
	}
	return &r
}

// Every operation in wire's table is served: none falls through to
// ENOSYS, and a successful answer carries what the entry says. An
// operation outside the table is EOPNOTSUPP, as an unknown keyctl
// command is in the kernel.
func TestEveryOperationIsServed(t *testing.T) {
	for s := range wire.Specs() {
		t.Run(s.Name, func(t *testing.T) {
			svc := keys.New()
			defer svc.Close()
			l := server.NewLocal(svc, keys.Cred{UID: 0, GID: 0, PID: os.Getpid()})
			defer l.Close()
			if r := l.Do(&wire.Request{Op: wire.OpJoinSession}); r.Errno != 0 {
				t.Fatalf("join: errno %d", r.Errno)
			}
			resp := l.Do(sampleRequest(t, s))
			if resp.Errno == uint16(keys.ENOSYS) {
				t.Fatalf("%s is in the table but not served", s.Name)
			}
			if err := s.CheckResponse(resp); err != nil {
				t.Fatal(err)
			}
		})
	}
	svc := keys.New()
	defer svc.Close()
	l := server.NewLocal(svc, keys.Cred{PID: os.Getpid()})
	defer l.Close()
	if r := l.Do(&wire.Request{Op: wire.Op(999)}); r.Errno != uint16(keys.EOPNOTSUPP) {
		t.Fatalf("an unknown operation: errno %d", r.Errno)
	}
}
