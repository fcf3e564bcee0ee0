// Package sharedvm runs system calls in a process that shares the
// calling process's memory, as vfork's child does: clone(CLONE_VM |
// CLONE_VFORK), the caller suspended until the child has made its calls
// and exited (or exec'd). Tests use it to make a process whose address
// space outlives it in another (its parent), the way an attacker keeps
// an exited or exec'd process's memory alive; [RunThread], in a thread of
// the calling process that exits when its calls are made.
package sharedvm

// A Call is one system call: its number and six arguments, and, once
// made, its result (Ret: the value, or minus the errno). Pointers in the
// arguments must stay valid (heap memory, not a stack that may move)
// until [Run] returns.
type Call struct {
	Nr   uintptr
	Args [6]uintptr
	Ret  uintptr
}
