package client

import (
	"os"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/wire"
)

// This file keeps the package free of the net package (and of the server
// package, which needs it): with cgo available, linking net links the C
// runtime, and a short-lived program such as ukeyctl then pays for the
// dynamic loader and for C threads on every start, a large share of its
// wall time.

// HelperEnv carries a request-key helper's token from the daemon to the
// helper it starts (see server.Helper).
const HelperEnv = endpoint.HelperEnv

// DefaultSocket returns where the daemon listens for the calling user:
// $UKEYS_SOCKET if set; /run/ukeys/ukeyd.sock for root (/var/run on macOS
// and the BSDs); else
// $XDG_RUNTIME_DIR/ukeys/ukeyd.sock, or a per-user directory under the
// temporary directory. [Dial] refuses a socket there, as anywhere, unless
// the caller or root owns its directory and the daemon answering on it
// runs as one of them ([ErrUntrusted]).
func DefaultSocket() string { return endpoint.Socket() }

// Handler serves requests in process; server.Local is one.
type Handler interface {
	Do(r *wire.Request) *wire.Response
	Close()
}

// New returns a client served in process by h, with exactly the
// daemon's behaviour when h is a server.Local:
//
//	c := client.New(server.NewLocal(svc, cred))
func New(h Handler) *Client {
	return &Client{local: h}
}

// dialUnix connects a stream socket to path, giving up after timeout if
// the daemon's backlog stays full, and returns it as a file that reads and
// writes through the runtime's poller. Errors wrap the errno, so that
// errors.Is(err, syscall.ENOENT) and ECONNREFUSED tell that no daemon
// listens.
//
// Nothing is written before the socket is trusted: its directory must be
// the caller's or root's and closed to others (checkSocketPath), and the
// process answering must run as the caller or root (checkPeer); otherwise
// the error wraps ErrUntrusted.
func dialUnix(path string, timeout time.Duration, blocking bool) (*os.File, error) {
	euid := os.Geteuid()
	if err := checkSocketPath(path, euid); err != nil {
		return nil, err
	}
	fd, err := unixSocket()
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	// A blocking connect on a Unix socket waits for room in the listener's
	// backlog for at most the send timeout.
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	for {
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "dial", Path: path, Err: err}
	}
	// Asked of the connected socket itself, so that nothing renamed into
	// place after checkSocketPath can pass.
	if err := checkPeer(fd, path, euid); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	var none syscall.Timeval
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &none); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	// Non-blocking, so that os.NewFile hands the descriptor to the poller
	// and a read waiting for the daemon parks the goroutine, not a thread;
	// unless the caller asked for blocking reads (WithBlockingIO).
	if !blocking {
		if err := syscall.SetNonblock(fd, true); err != nil {
			syscall.Close(fd)
			return nil, os.NewSyscallError("setnonblock", err)
		}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// setReceiveTimeout bounds a blocking socket's reads to d (SO_RCVTIMEO;
// 0: no bound): past it, a read fails with EAGAIN.
func setReceiveTimeout(s syscall.Conn, d time.Duration) {
	raw, err := s.SyscallConn()
	if err != nil {
		return
	}
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	raw.Control(func(fd uintptr) {
		syscall.SetsockoptTimeval(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	})
}
