// Package goroutine identifies goroutines and captures their stacks, for
// diagnostics only: stall reports, watchdog reports and self-checks.
//
// Go deliberately hides goroutine identity; the only portable way to learn
// it is the header line that [runtime.Stack] prints
// ("goroutine 42 [running]:"). [ID] costs about a microsecond, so callers
// use it when a goroutine registers or in checks that are compiled in only
// for tests, never on a fast path.
package goroutine
