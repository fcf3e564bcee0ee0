//go:build unix

package secmem

import (
	"math"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reserve maps the arena's region, inaccessible until mapRW, as large
// as the address space allows up to 32 GiB (payloads are bounded by the
// key quotas far below that); 0 if it cannot. Nothing in it is dumped.
func reserve() (base unsafe.Pointer, size uintptr) {
	// A quarter of a 32-bit address space at most.
	want := uint64(32 << 30)
	if math.MaxUint == math.MaxUint32 {
		want = 1 << 30
	}
	for size = uintptr(want); size >= 64<<20; size /= 2 {
		p, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANON|mapNoReserve)
		if err == nil {
			noDump(p, size)
			return p, size
		}
	}
	return nil, 0
}

func region(p unsafe.Pointer, n uintptr) []byte { return unsafe.Slice((*byte)(p), n) }

// mapRW makes [p, p+n) of the region readable and writable.
func mapRW(p unsafe.Pointer, n uintptr) bool {
	return unix.Mprotect(region(p, n), unix.PROT_READ|unix.PROT_WRITE) == nil
}

// lockRange locks [p, p+n) in memory (within RLIMIT_MEMLOCK).
func lockRange(p unsafe.Pointer, n uintptr) bool { return unix.Mlock(region(p, n)) == nil }

// memlockLimit is RLIMIT_MEMLOCK's soft limit, -1 if unlimited.
func memlockLimit() int64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0
	}
	if uint64(rl.Cur) == uint64(unix.RLIM_INFINITY) || uint64(rl.Cur) > math.MaxInt64 {
		return -1
	}
	return int64(rl.Cur)
}
