package secmem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

const mapNoReserve = unix.MAP_NORESERVE

// noDump keeps the region out of core dumps, and out of a child made by
// fork (a child made by Go's exec gets a fresh address space anyway).
func noDump(p unsafe.Pointer, n uintptr) {
	b := unsafe.Slice((*byte)(p), n)
	unix.Madvise(b, unix.MADV_DONTDUMP)
	unix.Madvise(b, unix.MADV_WIPEONFORK)
}
