// Package endpoint says where a ukeys client finds its daemon: the
// default socket path and the environment variables that override it or
// carry a request-key helper's token. The daemon (server) and the client
// both use it, so that they agree; it sits below both and imports only
// the standard library's os, path and syscall packages, so that a client
// program that links it links no networking code.
package endpoint
