// Package wire is the protocol between ukeys clients and the ukeyd
// daemon over a Unix stream socket.
//
// # Framing
//
// Every message is a frame: a 4-byte big-endian length, then that many
// bytes of body. A frame longer than [MaxFrame] is refused before anything
// is allocated for it.
//
// # Handshake
//
// The client opens with a Hello frame: the 4 bytes "UKEY" and a 2-byte
// big-endian protocol version. The server answers with its own Hello
// carrying the version it will speak (the lower of the two) or closes
// the connection if it speaks none of the client's. A server that will
// not serve the caller at all answers with a refusal instead: a Hello of
// version 0 followed by a 2-byte errno (EDQUOT: the caller's uid holds
// its share of the server already; EMFILE: the server as a whole is
// full), which [DecodeHello] returns as a *[Refused] error. Nothing longer
// than [MaxHello] is read before the handshake.
//
// [Reader] reads frames into a buffer that it wipes once each frame has
// been handled, so that no payload outlives its request in a connection's
// buffers.
//
// # Requests and responses
//
// After the handshake the client sends requests and the server answers
// each with one response carrying the same tag. A version 1 client may
// have several requests in flight and match answers by tag. Version 2
// adds one promise and nothing else: a client that opens with version 2
// or later sends each request only once it has read the answer to the one
// before (its first request may go with its hello, before the daemon's
// hello is read: a short-lived client presents its session that way). The server may then wait for the next request without first
// trying to read it, which saves a system call per round trip; a client
// that breaks the promise can only stall its own connection (until the
// server's read deadline). Version 3 adds only that the client, sending
// one request at a time, polls the socket for a while before it sleeps
// waiting for an answer, and asks the server to do the same waiting for
// its next request: a client calling in a tight loop then costs neither
// end a sleep and a wake-up per call. A client that does not poll opens
// with version 2 (a version 1 client keeps its several requests). A body
// is:
//
//	request:  tag u32 | op u16 | nInts u8 | nBufs u8 | ints i64… | bufs
//	response: tag u32 | errno u16 | nInts u8 | nBufs u8 | ints i64… | bufs
//
// and each buf is a u32 length followed by the bytes, where length
// 0xFFFFFFFF stands for "absent" (a NULL pointer in the C API, which the
// kernel distinguishes from an empty string). All integers are big-endian.
// A response with errno 0 succeeded; otherwise errno is the kernel's error
// number (ENOKEY, EACCES…) and the results are empty.
//
// Operation numbers are keyctl(2)'s where the kernel has one ([OpRevoke] is
// KEYCTL_REVOKE = 3 …); add_key, request_key and the daemon's own
// operations use numbers from 1000 up.
//
// # The table of operations
//
// One table says what every operation takes and answers: a [Spec] per
// operation ([SpecOf], [Specs]), listing its arguments in the order of the
// system call that carries it, each with its kind (integer, string,
// optional string, buffer), its bound and its position among the call's
// arguments, and what a success answers. On the wire the integers and the
// buffers each keep the table's order. A client builds a request with
// [Request.Set], which holds the arguments to the table; a server reads one
// through [Spec.Check], which cuts strings at their first NUL byte as the
// kernel's copies from user space do, holds them to their bounds (EINVAL)
// and hands back [Args] to read by position; the fuzz targets draw their
// requests from it. Because every argument records where add_key(2),
// keyctl(2) or request_key(2) passes it ([SyscallSpec]), the same table
// decodes those system calls when a supervisor intercepts them. Adding an
// operation is adding its entry, and a case where the server serves it.
//
// Decoding never panics and never allocates more than the frame holds:
// every decoder has a fuzz target in the test suite.
package wire
