package process

import "os"

// PID is the pid of the process h names, as the daemon's pid namespace
// numbers it; 0 for none (a caller whose pid the kernel did not tell).
func (h *Handle) PID() int { return h.pid }

// File is h's descriptor where the runtime's poller accepts it: it turns
// readable once the process has exited ([Handle.ExitPolled] tells, given
// the descriptor the poller hands back). nil where there is none; the
// caller then asks [Handle.Exited] from time to time.
func (h *Handle) File() *os.File { return h.file }

// Unpinned returns a handle of pid that holds no descriptor of it: it
// tells the process's exit by kill(pid, 0) alone, which cannot tell the
// process from a later one given its pid. It is for a process the daemon
// knows by pid only (a caller in a test rig, a record to follow up).
func Unpinned(pid int) Handle { return Handle{pid: pid} }
