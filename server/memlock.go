package server

import (
	"fmt"
	"strings"

	"github.com/ukeys/ukeys/internal/secmem"
)

// writeMemoryLocked adds to the status what of the daemon's memory is
// locked (never swapped out): all of it (mlockall), or the arena of
// payloads and buffers, as far as RLIMIT_MEMLOCK allowed, and what is
// not.
func writeMemoryLocked(b *strings.Builder) {
	st := secmem.Stats()
	switch {
	case st.LockedAll:
		b.WriteString("memory_locked: all\n")
	case st.Unlocked == 0 && st.Outside == 0:
		b.WriteString("memory_locked: arena (payloads and buffers; the rest of the process can be swapped out)\n")
	default:
		b.WriteString("memory_locked: part of the arena (the memory lock limit reached, or locking off; payloads can be swapped out)\n")
	}
	limit := "unlimited"
	if st.Limit >= 0 {
		limit = fmt.Sprint(st.Limit)
	}
	fmt.Fprintf(b, "memory_lock_limit: %s\n", limit)
	fmt.Fprintf(b, "arena_bytes: %d\narena_locked_bytes: %d\narena_unlocked_bytes: %d\narena_in_use_bytes: %d\npayload_bytes_outside_arena: %d\n",
		st.Mapped, st.Locked, st.Unlocked, st.InUse, st.Outside)
}
