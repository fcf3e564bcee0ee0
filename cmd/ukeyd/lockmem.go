package main

import (
	"fmt"
	"log/slog"

	"github.com/ukeys/ukeys/internal/secmem"
)

// The -lock-memory setting: what of the daemon's memory the kernel may
// not swap out. The kernel keeps user and logon payloads in slab memory,
// never swapped; the daemon's are in its own memory, which would be.
//
//   - all: the whole process is locked (secmem.LockAll), or the daemon
//     does not start. It needs CAP_IPC_LOCK or RLIMIT_MEMLOCK unlimited
//     (the system unit's LimitMEMLOCK=infinity).
//   - auto: all where the daemon may lock without bound; otherwise (a
//     user daemon, RLIMIT_MEMLOCK 8 MiB by default) only the arena of
//     payloads and the buffers they cross, up to the limit.
//   - arena: only the arena, up to the limit.
//   - off: nothing (for measuring what locking costs).
var lockModes = []string{"auto", "all", "arena", "off"}

// lockMemory applies the -lock-memory setting and logs what is locked
// and what is not.
func lockMemory(mode string, log *slog.Logger) error {
	switch mode {
	case "off":
		secmem.SetArenaLocking(false)
		log.Warn("ukeyd: memory not locked (-lock-memory off): payloads may be swapped out")
		return nil
	case "arena":
		logArena(log, "-lock-memory arena")
		return nil
	}
	ok, why := secmem.CanLockAll()
	if ok {
		if err := secmem.LockAll(); err != nil {
			ok, why = false, err.Error()
		}
	}
	switch {
	case ok:
		log.Info("ukeyd: memory locked: all of it (mlockall), none of it can be swapped out", "because", why)
	case mode == "all":
		return fmt.Errorf("-lock-memory all: cannot lock the whole process: %s", why)
	default:
		logArena(log, why)
	}
	return nil
}

func logArena(log *slog.Logger, why string) {
	st := secmem.Stats()
	log.Info("ukeyd: memory locked: the arena of payloads and the buffers they cross, up to the memory lock limit; the rest of the process can be swapped out",
		"because", why, "limit_bytes", st.Limit)
}
