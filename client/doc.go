// Package client is the Go API to ukeys, shaped like libkeyutils: one
// method per keyctl operation, errors comparable with [errors.Is] against
// the keyctl package's errno values (which package keys shares). A [Client]
// talks to the ukeyd daemon over its Unix socket, or is served in process
// ([New] with a server.Local) with exactly the daemon's behaviour. A Client
// may be shared by goroutines: by default their calls take turns, one
// round trip at a time; a Client dialled [WithPipelining] sends concurrent
// calls without waiting for each other's answers, which multiplies the
// throughput of one connection shared by many goroutines. It links none
// of the key retention model: its vocabulary is package keyctl's.
package client
