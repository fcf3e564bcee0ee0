package peer

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerPID is the pid of the process that connected, from the cr_pid of
// the xucred that LOCAL_PEERCRED filled (FreeBSD 13 and later; 0 before,
// which the server takes as a process of its own per connection).
//
// x/sys/unix declares that member as a blank pointer (it shares a union
// with an unused pointer at the end of struct xucred), so it is read in
// place: a pid_t at the start of the union, which is the struct's last
// pointer-sized word.
func peerPID(_ int, xc *unix.Xucred) (int, error) {
	off := uintptr(unix.SizeofXucred) - unsafe.Sizeof(uintptr(0))
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(xc), off))), nil
}
