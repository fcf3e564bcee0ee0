// Package invariants reports whether expensive self-checks are compiled in.
//
// The checks are on in builds with the race detector (the test suite always
// runs with -race) or with the build tag ukeys_invariants, and off otherwise
// so that production builds pay nothing for them. Code guards each check
// with the constant [Enabled], which lets the compiler drop it entirely:
//
//	if invariants.Enabled {
//		checkSomethingExpensive()
//	}
package invariants
