//go:build !linux && !darwin

package process

// TreeSupported: the daemon cannot walk a process's ancestry here
// (FreeBSD's kinfo_proc is not in x/sys/unix, and reading it by offset
// would be fragile), so it refuses request-key helper tokens, saying so
// in its log (attachHelper). Helpers still run; they cannot act with the
// authority of the upcall, so their keys end negative or time out.
const TreeSupported = false

func Stat(int) (ppid int, start string, ok bool) { return 0, "", false }
