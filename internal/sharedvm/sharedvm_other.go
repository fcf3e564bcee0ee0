//go:build !(linux && amd64)

package sharedvm

import "syscall"

// Supported reports whether [Run] works on this platform.
const Supported = false

// Run is not available here.
func Run([]Call) (int, error) { return 0, syscall.ENOSYS }

// RunThread is not available here.
func RunThread([]Call) (int, error) { return 0, syscall.ENOSYS }
