package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// startLockWait bounds how long a daemon waits for the one starting
// beside it: a take-over or a fresh start takes seconds, not minutes.
const startLockWait = 2 * time.Minute

// lockStart takes the lock beside socket (socket.lock) that a daemon
// holds from its look at the socket (-takeover auto: does a daemon
// serve it?) until it serves. Two daemons started at once where none
// serves (a DaemonSet's pods after a node's reboot, or maxSurge's new
// pod while the old one still starts) would both find none and start
// afresh: the second failing on the first's socket, or removing it as
// a stale one between the first's bind and listen, so that the first
// served a socket no path reached. With the lock the second looks once
// the first serves, and takes over from it. The file is never removed:
// a daemon locking a new file while another holds the old one would
// bring the race back. It returns the function that lets go of it.
func lockStart(socket string, log *slog.Logger) (release func(), err error) {
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o755
	}
	if err := os.MkdirAll(filepath.Dir(socket), mode); err != nil {
		return nil, err
	}
	path := socket + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	for start, said := time.Now(), false; ; {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if time.Since(start) > startLockWait {
			f.Close()
			return nil, fmt.Errorf("another daemon has held %s for %v while starting", path, startLockWait)
		}
		if !said {
			log.Info("ukeyd: another daemon is starting on the socket; waiting until it serves", "lock", path)
			said = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() { f.Close() }, nil
}
