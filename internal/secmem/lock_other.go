//go:build !linux

package secmem

import "errors"

// CanLockAll says whether this process may lock all its memory: here,
// never (mlockall's MCL_ONFAULT is Linux's).
func CanLockAll() (bool, string) { return false, "mlockall with MCL_ONFAULT is Linux's" }

// LockAll fails outside Linux.
func LockAll() error { return errors.New("mlockall with MCL_ONFAULT is Linux's") }

// LockedAll is false outside Linux.
func LockedAll() bool { return false }
