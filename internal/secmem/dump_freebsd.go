package secmem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const mapNoReserve = 0

// noDump keeps the region out of core dumps.
func noDump(p unsafe.Pointer, n uintptr) {
	unix.Madvise(unsafe.Slice((*byte)(p), n), unix.MADV_NOCORE)
}
