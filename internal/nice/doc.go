// Package nice runs expensive work (a signature check, a key derivation)
// at the lowest priority on a thread of its own ([Run]), so that while it
// runs the kernel gives the processors to every other thread first, as
// the kernel charges its own such work to the calling task's nice level.
// Only Linux sets a priority per thread (nice_linux.go); elsewhere Run
// just calls f (nice_other.go).
package nice
