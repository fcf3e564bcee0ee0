// Package server serves a [keys.Service] to client processes over Unix
// stream sockets, speaking the wire protocol: the heart of the ukeyd
// daemon.
//
// The server learns every caller from the socket (SO_PEERCRED: uid, gid,
// pid; SO_PEERGROUPS: supplementary groups), never from what the client
// says, and lets the keys package decide every permission against those
// credentials. A caller whose pid it cannot see (another pid namespace) is a
// process of its own per connection. Each client process gets one
// [keys.Caller], shared by all its connections and kept, with its process
// and session keyrings, until the process exits (process.go). A process
// inherits its session from the nearest ancestor the server knows
// (ancestry.go); one with none, and no token, joins its login's session
// keyring, which the server makes as pam_keyinit would (login.go;
// [Config.NoLogins] turns it off). Sessions cross to other processes by
// token ([wire.OpSessionToken], [wire.OpSessionAttach]); request-key helpers
// are run by [Helper] with a token that grants the authority to construct
// one key, to the helper's process tree only, for as long as that authority
// lasts (helper.go).
//
// A daemon hands everything it holds to the daemon that takes over from it
// ([TakeOver], [wire.OpTakeover]; handover.go): its listening sockets, its
// clients' connections parked between two requests, every key, process
// record, session, login, watch and seccomp listener, so that an upgrade
// refuses no client and loses nothing; or, stopped for a restart, to the
// next daemon through a stream and descriptors kept elsewhere
// ([Server.Freeze], [Thaw]).
//
// Everything a caller can make the server hold (connections, tracked
// processes and their pidfds, buffered bytes, expensive operations) is
// bounded per uid and in total ([Limits], limits.go); a uid past its bound
// is refused with EDQUOT and nobody else is. accept errors never end
// [Server.Serve].
//
// Each connection is served by one goroutine that reads a request, runs
// it and writes the answer with one write; the request, its body and the
// response frame are reused from one request to the next, so reading and
// writing frames allocates nothing per request, and each is wiped once
// answered ([wire.Reader]), so that no payload stays in a connection's
// buffers.
//
// Who a request is served for is a caller (caller.go), apart from how the
// request came: a connection has one, an intercepted thread (intercept.go)
// and [Local] are one with no connection, and each request runs through
// the same dispatch (dispatch.go).
package server
