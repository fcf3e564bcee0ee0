//go:build !linux

package nice

// Run runs f: only Linux sets a priority per thread (elsewhere
// setpriority would lower the whole daemon's).
func Run(f func()) { f() }
