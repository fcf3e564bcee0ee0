// Package secmem keeps secrets out of swap and core dumps: memory the
// kernel may not page out (mlock) nor write into a core (MADV_DONTDUMP).
//
// The kernel keeps user and logon payloads in slab memory, which is never
// swapped; a Go program's heap is anonymous memory, which is. Two ways
// out, one for each kind of daemon:
//
//   - [LockAll] locks the whole process, now and for every mapping it makes
//     later (mlockall MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT: pages are locked
//     as they are first touched, so the runtime's reserved but unused
//     address space costs nothing). It is for a process that may lock
//     without bound: CAP_IPC_LOCK, or RLIMIT_MEMLOCK unlimited (the
//     system daemon, whose unit says LimitMEMLOCK=infinity). Where the
//     limit is finite, a locked process whose next mapping would pass it
//     gets ENOMEM from mmap, which Go's runtime cannot survive: LockAll
//     refuses then ([CanLockAll] says why).
//   - The arena ([Alloc], [Free]) holds payloads and the buffers they cross
//     outside Go's heap, in mappings that are locked while the memory
//     lock limit allows (a user daemon's: 8 MiB by default) and never
//     dumped, wiped when freed. [Stats] says how much of it is locked.
//
// A copy leaves pieces of what it copied in the processor's vector
// registers (Go's memmove moves 16 or 32 bytes at a time through them),
// and a signal delivered before they are overwritten (Go's runtime sends
// one to preempt a goroutine) writes them into the signal's stack and
// the goroutine's, Go's memory, which a user daemon cannot lock: even
// with every buffer a payload crosses in the arena, such pieces reach
// swap. [Copy] copies through no vector register (REP MOVSB on
// amd64), and [WipeRegisters] zeroes them after a copy that cannot avoid
// them (an append of Go's).
//
// What neither covers is said by Stats and by the daemon's status.
package secmem
