//go:build !linux

package server

// loginSupported: without pidfds the daemon cannot keep a login's anchor
// safe from pid reuse, so a process without a session keeps the kernel's
// fallback to its user-session keyring.
const loginSupported = false

func loginOf(int) (loginID, bool) { return loginID{}, false }

func effectiveUID(int) (uint32, bool) { return 0, false }
