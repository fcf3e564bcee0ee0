//go:build !linux

package forks

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// Subscribe: only Linux has the process events connector; elsewhere the
// daemon learns a process's ancestry when it meets it.
func Subscribe(func(msg string, args ...any)) *os.File { return nil }

// Read: nothing is ever subscribed here.
func Read(syscall.RawConn, []byte, *sync.Mutex) (int, bool, error) {
	return 0, false, errors.New("no process events connector on this system")
}

// Drain: nothing to apply here.
func Drain(syscall.RawConn, []byte, func(Event)) {}

// Lost: no events to lose here.
func Lost(error) bool { return false }
