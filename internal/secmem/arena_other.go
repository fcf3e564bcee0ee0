//go:build !unix

package secmem

import "unsafe"

// Without mmap and mlock there is no arena: Alloc uses Go's heap.

func reserve() (unsafe.Pointer, uintptr)     { return nil, 0 }
func mapRW(unsafe.Pointer, uintptr) bool     { return false }
func lockRange(unsafe.Pointer, uintptr) bool { return false }
func memlockLimit() int64                    { return 0 }
