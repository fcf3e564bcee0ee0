// Package container tells which container a process is in, as the
// seccomp agent must before it serves a runtime's listener: an
// [Identity] is the pid namespace of the container's processes (or, for
// a container that shares the host's pids, its mount namespace), which
// no process outside it can enter without CAP_SYS_ADMIN over it; [Of]
// reads it from the processes a runtime's state names, and
// [Identity.Holds] tells whether a caller is inside. A [Pod] is what the
// containers of one pod share (their IPC and network namespaces), read
// by [PodOf], to which a pod's sandbox id is bound. Only Linux has
// containers to tell apart (identity_linux.go); elsewhere none is
// admitted (identity_other.go).
package container
