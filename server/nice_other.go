//go:build !linux

package server

// runNiced runs f: only Linux sets a priority per thread (elsewhere
// setpriority would lower the whole daemon's).
func runNiced(f func()) { f() }
