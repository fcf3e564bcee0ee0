package server

import (
	"sync/atomic"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/secmem"
	"github.com/ukeys/ukeys/keys"
)

// caller is who a request is served for, whatever brought the request:
// a client's socket (a conn, which has one), an intercepted thread's
// system call (intercept.go: a caller per thread, kept with its process),
// or a program's in-process calls ([Local]). Its dispatch method serves
// its requests. It holds the [keys.Caller] that the keys package checks
// every request against and what the daemon keeps beside it: the
// credentials, the process, a helper's grant, the watches and the buffer
// payloads are read into.
type caller struct {
	s    *Server
	cred keys.Cred
	proc *proc
	// kc is the keys package's caller the requests act as: the
	// process's, a thread's (keys.Caller.NewThread), or, once a helper
	// token is accepted, the request-key helper's (attachHelper).
	kc *keys.Caller
	// helper is the grant of the request-key helper the caller acts
	// for, once it has presented the helper's token (attachHelper).
	helper *helperGrant

	// conn is the socket connection the caller calls through; nil for an
	// intercepted thread and in process.
	conn *conn

	// watch is the queue of the caller's watches (OpWatchKey), read by
	// OpWatchNext, made at the first watch; the connection closes it
	// from another goroutine (closeIdle, pauseIdle).
	watch atomic.Pointer[keys.WatchQueue]

	// intercepted: the caller is an intercepted program's thread. Its
	// watches go to notification pipes the daemon made
	// (intercept.WatchPipe): pipe is the one the call being served names
	// (KEYCTL_WATCH_KEY's descriptor), set for that call.
	intercepted bool
	pipe        *intercept.WatchPipe
	// call is the intercepted call being served, whose thread's
	// capabilities count if it says so (CapsCount); nil between calls.
	call atomic.Pointer[intercept.Caller]

	// rbuf holds payloads read (dispatch.go), wiped after each answer;
	// on a socket's caller it is in secmem's arena, as the connection's
	// frames are, freed when it is larger than readKeep once answered
	// and when the connection ends.
	rbuf []byte
}

// account returns the uid what the caller's requests cost is charged
// to: the one its connection was accepted for, or without a socket (an
// intercepted process, or in process), its process's.
func (c *caller) account() uint32 {
	if c.conn == nil {
		return c.proc.charge
	}
	return c.conn.charge
}

// read reads a key's payload into the caller's read buffer, which the
// server wipes once the answer is written: a key read then allocates no
// copy of the payload.
func (c *caller) read(cl *keys.Caller, id keys.Serial) ([]byte, error) {
	buf := c.rbuf[:cap(c.rbuf)]
	for {
		n, err := cl.ReadInto(id, buf)
		if err != nil {
			return nil, err
		}
		if n <= len(buf) {
			return buf[:n], nil
		}
		// Too small (or the payload grew meanwhile): a buffer that fits.
		if c.conn == nil {
			// An intercepted call's, or an in-process one's: Go's heap,
			// the buffer the answer is taken from after dispatch returns.
			buf = make([]byte, n)
			if n <= readKeep {
				c.rbuf = buf // small payloads are the common case: keep it
			}
			continue
		}
		// A socket's caller: in the arena, as its frames are. Small
		// payloads are the common case: a buffer of up to readKeep
		// bytes is kept; a larger one is freed once answered (run2).
		c.freeRead()
		c.rbuf = secmem.Alloc(max(n, 256))
		buf = c.rbuf
	}
}

// readKeep is the largest read buffer a caller keeps between reads.
const readKeep = 4 << 10

// freeRead wipes the caller's read buffer and lets go of it: frees it,
// if it is the arena's.
func (c *caller) freeRead() {
	if cap(c.rbuf) > 0 {
		secmem.Free(c.rbuf[:cap(c.rbuf)])
	}
	c.rbuf = nil
}

// closeWatch closes the caller's watch queue, if it has one: its
// watches go, and an OpWatchNext waiting on it wakes.
func (c *caller) closeWatch() {
	if q := c.watch.Load(); q != nil {
		q.Close()
	}
}
