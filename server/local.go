package server

import (
	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// Local serves requests in process, as the daemon would for a client with
// credentials cred, without a socket. The client package's in-process mode
// uses it, so that programs and tests get exactly the daemon's behaviour.
type Local struct {
	c *caller
}

// NewLocal returns a handler for svc acting for cred.
func NewLocal(svc *keys.Service, cred keys.Cred) *Local {
	s := New(svc, Config{})
	p := &proc{caller: svc.NewCaller(cred), handle: process.Handle{}, conns: 1, charge: cred.UID}
	p.settled.Store(true) // a caller in process has no login (login.go)
	return &Local{c: &caller{s: s, cred: cred, proc: p, kc: p.caller}}
}

// Do serves one request.
func (l *Local) Do(r *wire.Request) *wire.Response {
	resp := l.c.dispatch(r)
	resp.Tag = r.Tag
	return resp
}

// Close releases the caller's keyrings, as a process exit does.
func (l *Local) Close() {
	l.c.closeWatch()
	l.c.proc.caller.Release()
}
