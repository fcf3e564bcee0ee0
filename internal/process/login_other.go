//go:build !linux

package process

// LoginSupported: without pidfds the daemon cannot keep a login's anchor
// safe from pid reuse, so a process without a session keeps the kernel's
// fallback to its user-session keyring.
const LoginSupported = false

// Login: no logins are read here.
func Login(int) (id uint64, audit, ok bool) { return 0, false, false }

// EffectiveUID: not read here.
func EffectiveUID(int) (uint32, bool) { return 0, false }
