//go:build !amd64

package secmem

// WipeRegisters zeroes the processor's vector registers where this
// package knows how (amd64); elsewhere it does nothing.
func WipeRegisters() {}

// Copy copies src into dst as the built-in copy does (see doc.go).
func Copy(dst, src []byte) int { return copy(dst, src) }
