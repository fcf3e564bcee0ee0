package procfs

import (
	"os"
	"strconv"
	"syscall"
)

// ReadFile reads a small file of /proc whole, in three system calls
// (open, read, close) where [os.ReadFile] makes ten: it stats the file
// and tries to register it with the runtime's poller, which refuses
// /proc's files. The daemon reads several for every process it meets
// (its stat and its ancestors', its status), on the way to answering
// the process's first request. Where /proc is not [Ours], it reads
// nothing (ENOENT).
func ReadFile(path string) ([]byte, error) {
	fd, err := Open(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	b := make([]byte, 0, 2048)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

// openRetry opens path close-on-exec with flags, again if a signal
// interrupts it.
func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(path, flags|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// statusPath is /proc/<pid>/status.
func statusPath(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/status" }
