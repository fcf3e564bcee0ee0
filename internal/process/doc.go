// Package process is how the daemon follows a client process through
// the kernel, immune to its pid being given to another process: a
// [Handle] pins the process (a pidfd on Linux, a kqueue watching its exit
// on macOS and FreeBSD, its pid alone elsewhere) and tells its exit, its
// capabilities and its user namespace; [Stat] reads a process's parent
// and start time, for walks of its ancestry; [AwaitExit] waits for a
// helper's exit without reaping it; [NSOwner] finds the uid that owns a
// process's user namespace; [AsPrivileged] says whether a process is
// the daemon's equal (what a hand-over or a container runtime must be).
//
// The surface is the same on every system, each answering as far as it
// can (handle_linux.go, handle_bsd.go, handle_other.go; stat_*, wait_*,
// userns_*, owner_*, login_*), except what only Linux has: the
// namespace identities that containers are told apart by ([NSID],
// [NSOf], [OwnedByOurs], [PIDNSBelow], for package container).
package process
