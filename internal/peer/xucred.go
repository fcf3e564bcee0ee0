package peer

import (
	"fmt"
)

// xucredVersion is XUCRED_VERSION of <sys/ucred.h>, the same on macOS and
// FreeBSD: the layout of struct xucred that the daemon knows how to read.
const xucredVersion = 0

// xucredCred turns what LOCAL_PEERCRED reports of a peer (a struct
// xucred: its version, effective uid, the number of groups and the groups)
// into the caller's credentials. It lives outside the BSD files so that it
// is tested on Linux too.
//
// In an xucred the first group is the effective gid and the rest are the
// supplementary groups (the BSD convention, kept by FreeBSD even where
// struct ucred no longer stores it so). The kernel truncates them to its
// XU_NGROUPS (16): a macOS user in more groups than that is checked
// against the first 16 only, which can only deny, never grant, what the
// kernel's full list would.
func xucredCred(version uint32, uid uint32, ngroups int, groups []uint32, pid int) (Cred, error) {
	if version != xucredVersion {
		return Cred{}, fmt.Errorf("LOCAL_PEERCRED: xucred version %d, want %d", version, xucredVersion)
	}
	if ngroups < 1 || ngroups > len(groups) {
		// Not even the effective gid: nothing to check permissions with.
		return Cred{}, fmt.Errorf("LOCAL_PEERCRED: %d groups", ngroups)
	}
	if pid < 0 {
		pid = 0 // unknown: a process of its own per connection
	}
	cred := Cred{UID: uid, GID: groups[0], PID: pid}
	if ngroups > 1 {
		cred.Groups = append([]uint32(nil), groups[1:ngroups]...)
	}
	return cred, nil
}
