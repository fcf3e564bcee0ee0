//go:build !linux && !darwin && !freebsd

package process

// AwaitExit cannot wait for a child without reaping it here, so it
// returns at once: the helper's grant ends as it starts. Helper tokens are
// refused on these systems anyway ([TreeSupported]).
func AwaitExit(int) {}
