// Package testutil holds the waiting helpers that the concurrency tests
// of several packages share. They check liveness and safety, never speed:
// no test in this project asserts an upper bound on wall-clock time.
package testutil
