package secmem

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func wipeRegisters(avx bool)

//go:noescape
func copyString(dst, src unsafe.Pointer, n uintptr)

var hasAVX = cpu.X86.HasAVX

// WipeRegisters zeroes the processor's vector registers, which a copy of
// a payload (Go's memmove) leaves holding pieces of it: see doc.go.
func WipeRegisters() { wipeRegisters(hasAVX) }

// Copy copies src into dst as the built-in copy does, for dst and src
// that do not overlap or where dst is before src, through no register a
// signal could write out: see doc.go.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n > 0 {
		copyString(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(n))
	}
	return n
}
