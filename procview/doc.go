// Package procview serves a key namespace's own /proc/keys,
// /proc/key-users and /proc/sys/kernel/keys/* through FUSE, as LXCFS
// serves a container its own /proc/meminfo: a container's recipe
// bind-mounts the files over the kernel's, and each reader gets the
// view of the key namespace its process is a member of (the seccomp
// agent's, package agent), never the host kernel's nor another
// container's. libkeyutils' find_key_by_type_and_desc falls back to
// reading /proc/keys, and keyctl and keyutils read the sysctls.
//
// [Mount] mounts the files in a directory:
//
//	keys  key-users  sys/kernel/keys/{gc_delay,maxbytes,maxkeys,
//	                   persistent_keyring_expiry,root_maxbytes,root_maxkeys}
//
// Who reads is who the kernel says: the FUSE request's pid (the reading
// thread, in the daemon's pid namespace), its process pinned by a pidfd
// for as long as its answer is made and trusted only if it still lives
// afterwards, its credentials (filesystem uid and gid, groups) read
// from /proc/<tid>/status as the agent's intercepted calls are checked.
// A reader's view is made when it opens a file (the kernel's /proc/keys
// is checked with the opener's credentials) and read from that copy.
//
// A reader in no key namespace gets ENOENT, unless it is a host
// process (in the daemon's own pid and mount namespaces) and
// [Config.Host] is set: it then sees the daemon's own store, as
// `ukeyctl` does. A process in a pid or mount namespace of its own that
// no namespace holds (a container the agent does not serve, or whose
// container's init has exited) gets ENOENT: it must never see the
// host's keys, which its uid might own, nor another container's.
//
// /proc/keys and /proc/key-users are read-only; the sysctls are
// writable by the namespace's root (filesystem uid 0), as `keyctl`'s
// sysctl writes through the daemon are, and take effect in that
// namespace only. A write is one decimal number, as the kernel's
// proc_dointvec takes it ([ParseInt]).
package procview
