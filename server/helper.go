package server

import (
	"sync"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// A request-key helper's token stands for the kernel's authorisation key,
// which a helper possesses only through its own session, which grants
// only what request_key_auth grants, and which dies when the key is
// constructed or the wait times out. So a token is bound three ways:
//
//   - to the helper process the daemon started and its descendants: a
//     connection whose peer is any other process (whatever its uid, root
//     included) is refused with EACCES. A refusal leaves the grant alone:
//     burning the token would let anyone who learns it (it sits in the
//     helper's environment) make the daemon negate the key, and the wrong
//     process gains nothing from it anyway;
//   - to the authority's lifetime: once the helper exits, the upcall times
//     out or the daemon kills the helper, or once the authorisation is
//     used up (instantiated, negated, rejected) or revoked, every request
//     on a connection that attached with the token fails with
//     EKEYREVOKED, what keyctl users get from a dead authorisation key; it
//     never falls back to acting as the requestor;
//   - to the authority's rights (permits): assume it, instantiate, negate
//     or reject the key (the keys package allows only the key of the
//     assumed authority, with the kernel's EPERM for others), describe the
//     key, set its timeout, read and describe the authorisation key (the
//     callout information), search and request_key without a callout
//     through the requestor's keyrings and read a non-keyring key found
//     that way, resolve special keyring ids, capabilities. Everything else
//     is refused with EACCES.

// helperGrant is what one request-key helper token grants: the authority
// of one upcall, to the process tree of the helper the daemon started, for
// as long as the upcall and its authorisation last.
type helperGrant struct {
	up *keys.Upcall
	// caller acts for the helper: a fork of up.Helper (same credentials,
	// same _req.N session), which the grant releases itself once it has
	// ended and no request is using it, so that a request admitted just
	// before the end never runs on a released caller.
	caller *keys.Caller

	// ready is closed once pid is set: the helper's pid, or 0 if it could
	// not be started.
	ready chan struct{}
	once  sync.Once
	pid   int

	mu       sync.Mutex
	ended    bool // the helper exited (not yet reaped) or the upcall ended
	inflight int  // requests admitted (enter) and not yet done (leave)
}

// addHelper registers a new token for u's helper.
func (s *Server) addHelper(u *keys.Upcall) (string, *helperGrant) {
	g := &helperGrant{up: u, caller: u.Helper.Fork(0), ready: make(chan struct{})}
	token := newToken()
	s.mu.Lock()
	s.tokens.addHelper(token, g)
	s.mu.Unlock()
	return token, g
}

// dropHelper forgets a token and ends its grant.
func (s *Server) dropHelper(token string, g *helperGrant) {
	s.mu.Lock()
	s.tokens.removeHelper(token)
	s.mu.Unlock()
	g.started(0) // if the helper never started: attach waits no longer
	g.end()
}

// addHelper registers g under token. s.mu is held.
func (t *tokenTable) addHelper(token string, g *helperGrant) { t.helpers[token] = g }

// removeHelper forgets a helper's token. s.mu is held.
func (t *tokenTable) removeHelper(token string) { delete(t.helpers, token) }

// helpersRunning is how many request-key helpers hold a token: upcalls
// in progress. s.mu is held.
func (t *tokenTable) helpersRunning() int { return len(t.helpers) }

// started records the helper's pid (0: it did not start); only the first
// call counts.
func (g *helperGrant) started(pid int) {
	g.once.Do(func() {
		g.pid = pid
		close(g.ready)
	})
}

// end ends the grant: no request is admitted any more, and the caller is
// released once the requests in flight are done.
func (g *helperGrant) end() {
	g.mu.Lock()
	g.ended = true
	idle := g.inflight == 0
	g.mu.Unlock()
	if idle {
		g.caller.Release() // idempotent
	}
}

// enter admits a request: EKEYREVOKED once the grant or its authorisation
// is over. Every successful enter is followed by leave.
func (g *helperGrant) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended || !g.up.Authorized() {
		return keys.EKEYREVOKED
	}
	g.inflight++
	return nil
}

// leave ends a request that enter admitted.
func (g *helperGrant) leave() {
	g.mu.Lock()
	g.inflight--
	release := g.ended && g.inflight == 0
	g.mu.Unlock()
	if release {
		g.caller.Release()
	}
}

// isAuthKey reports whether id names the upcall's authorisation key.
func (g *helperGrant) isAuthKey(id keys.Serial) bool {
	return id == keys.ReqKeyAuthKey || id == g.up.AuthKey
}

// permits reports whether the authority allows request a (nil) or not
// (EACCES). It runs between enter and leave, so cl is not released.
func (g *helperGrant) permits(cl *keys.Caller, a wire.Args) error {
	target := g.up.Key
	switch a.Op() {
	case wire.OpCapabilities:
		return nil
	case wire.OpIntercept:
		// Its own program tree's calls, which then act with this same
		// authority (intercept.go).
		return nil
	case wire.OpAssumeAuthority:
		// Its own authorisation only (or 0, which drops it).
		if id := a.Serial(0); id == target || id == 0 {
			return nil
		}
	case wire.OpInstantiate, wire.OpNegate, wire.OpReject:
		// The keys package lets only the key of the assumed authority be
		// settled (EPERM otherwise, as the kernel's
		// keyctl_instantiate_key_common), and links it only into a keyring
		// that the requestor may write.
		return nil
	case wire.OpDescribe, wire.OpGetSecurity:
		// The kernel lets the holder of the authorisation describe the key
		// without View, and the authorisation key is the helper's own.
		if id := a.Serial(0); id == target || g.isAuthKey(id) {
			return nil
		}
	case wire.OpSetTimeout:
		// Allowed by the kernel to the holder of the authorisation.
		if a.Serial(0) == target {
			return nil
		}
	case wire.OpRead:
		// The callout information, or a key found through the requestor's
		// keyrings; never a keyring's listing.
		if id := a.Serial(0); g.isAuthKey(id) || cl.PossessesNonKeyring(id) {
			return nil
		}
	case wire.OpSearch:
		// A search on the requestor's behalf, linking nothing.
		if a.Serial(3) == 0 {
			return nil
		}
	case wire.OpRequestKey:
		// Without a callout and a destination: a search through the
		// requestor's keyrings (keyutils' %{type:description}). With a
		// callout it would create a key in the requestor's name and start
		// another upcall; with a destination, link into its keyrings.
		if a.Bytes(2) == nil && a.Serial(3) == 0 {
			return nil
		}
	case wire.OpGetKeyringID:
		// Special ids only, and creating no thread or process keyring.
		id := a.Serial(0)
		if id < 0 && (a.Int(1) == 0 || id != keys.ThreadKeyring && id != keys.ProcessKeyring) {
			return nil
		}
	}
	return keys.EACCES
}

// dispatchHelper serves a request of a caller that attached with a
// helper token, whose grant is g: only while the grant lasts, and only
// what it permits.
func (c *caller) dispatchHelper(g *helperGrant, a wire.Args) *wire.Response {
	if err := g.enter(); err != nil {
		return fail(err)
	}
	defer g.leave()
	if err := g.permits(c.kc, a); err != nil {
		return fail(err)
	}
	return c.run(a)
}

// attachHelper makes the caller act for the request-key helper whose
// grant is g, if its peer is that helper or one of its descendants.
func (c *caller) attachHelper(g *helperGrant) (keys.Serial, error) {
	if !process.TreeSupported {
		c.s.log.Warn("ukeyd: request-key helper tokens are not supported on this system (it cannot tell the helper's process tree); refused",
			"uid", c.cred.UID, "pid", c.cred.PID, "key", int32(g.up.Key))
		return 0, keys.EACCES
	}
	<-g.ready // the helper may connect before the daemon learns its pid
	if g.pid <= 0 || !inProcessTree(c.cred.PID, &c.proc.handle, g.pid) {
		// The token itself is never logged: it is a secret.
		c.s.log.Warn("ukeyd: request-key helper token presented by a process outside the helper's tree; refused",
			"uid", c.cred.UID, "pid", c.cred.PID, "key", int32(g.up.Key))
		return 0, keys.EACCES
	}
	// Checked after the walk: while the grant has not ended, the helper
	// has not been reaped, so its pid, where the walk ended, was still
	// the helper's.
	if err := g.enter(); err != nil {
		return 0, err
	}
	defer g.leave()
	c.helper = g
	c.kc = g.caller
	if k := g.caller.Session(); k != nil {
		return k.Serial(), nil
	}
	return 0, nil
}

// maxTreeDepth bounds the walk from a process up to a helper.
const maxTreeDepth = 128

// inProcessTree reports whether the process with pid pid, which h
// identifies against pid reuse, is the process root or a descendant of
// it, by walking its parents ([process.Stat]: /proc on Linux, sysctl on macOS).
// The caller must make sure that root's pid has not been reused meanwhile
// (a helper the daemon has not reaped). A pid of 0 (a process in a pid
// namespace the daemon cannot see) or a host without /proc is refused.
func inProcessTree(pid int, h *process.Handle, root int) bool {
	if pid <= 0 || root <= 0 || h == nil {
		return false
	}
	cur := pid
	ppid, start, ok := process.Stat(cur)
	if !ok {
		return false
	}
	for depth := 0; cur != root; depth++ {
		if depth >= maxTreeDepth || ppid <= 0 {
			return false
		}
		parent := ppid
		pppid, pstart, ok := process.Stat(parent)
		if !ok {
			return false
		}
		// cur is still the same process and still parent's child: had
		// parent exited before its stat was read (and its pid gone to
		// another process), cur would have been reparented before that
		// pid was free, so what was read is parent's.
		if again, againStart, ok := process.Stat(cur); !ok || again != parent || againStart != start {
			return false
		}
		cur, ppid, start = parent, pppid, pstart
	}
	// The walk began at the pid the kernel reported for the connection:
	// if that process is still there, its pid was not reused meanwhile,
	// and the walk was its ancestry.
	return !h.Exited()
}
