package intercept

import (
	"errors"

	"github.com/ukeys/ukeys/wire"
)

// ErrUnsupported reports a system without seccomp user notification.
var ErrUnsupported = errors.New("intercept: seccomp user notification is not supported here")

// Caller is who made an intercepted call: the thread (Tid) and its
// process (Pid), as the supervisor's pid namespace sees them.
type Caller struct {
	Tid, Pid int
}

// A Handler serves one decoded call as the daemon serves a request from
// its socket. The request's buffers are wiped once the handler returns;
// the response's are copied into the caller's memory and then wiped.
type Handler interface {
	Serve(c Caller, r *wire.Request) *wire.Response
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(c Caller, r *wire.Request) *wire.Response

// Serve calls f.
func (f HandlerFunc) Serve(c Caller, r *wire.Request) *wire.Response { return f(c, r) }
