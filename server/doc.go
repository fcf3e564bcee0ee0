// Package server serves a keys.Service to client processes over Unix
// stream sockets, speaking the wire protocol: the heart of the ukeyd
// daemon.
//
// The server learns every caller from the socket (SO_PEERCRED: uid, gid,
// pid; supplementary groups from /proc), never from what the client says,
// and lets the keys package decide every permission against those
// credentials. Each client process gets one keys.Caller, shared by all
// its connections and kept, with its process and session keyrings, until
// the process exits (process.go). Sessions cross to other processes by
// token (OpSessionToken, OpSessionAttach); request-key helpers are run by
// Helper with a token that grants the authority to construct one key.
//
// Each connection is served by one goroutine that reads a request, runs
// it and writes the answer with one write; the request, its body and the
// response frame are reused from one request to the next, so reading and
// writing frames allocates nothing per request.
package server
