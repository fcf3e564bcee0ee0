// Package sock is the one place where ukeys moves frames over a Unix
// stream socket, for the daemon's connections and the client's alike:
// frame assembly into reused buffers ([Frames]), reading into a buffer that
// is wiped once each frame is handled ([wire.Reader]), the rule for which
// buffers are kept ([Recycle]: wiped always, dropped above [KeepMax]), the
// write-then-wait exchange that saves a system call per round trip
// ([Conn.FlushAndWait]), and deadlines that move lazily ([Deadline]).
//
// Every buffer that has held a frame is wiped before it is reused or
// dropped: frames carry key payloads, and a payload must not outlive its
// request in memory the process keeps.
package sock
