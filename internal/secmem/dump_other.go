//go:build unix && !linux && !freebsd

package secmem

import "unsafe"

const mapNoReserve = 0

// noDump: this system has no way to keep a mapping out of a core dump;
// the daemon's own refusal to dump (where it has one) is all there is.
func noDump(unsafe.Pointer, uintptr) {}
