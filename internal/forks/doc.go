// Package forks reads Linux's process events connector (NETLINK_CONNECTOR,
// CN_IDX_PROC): [Subscribe] opens a socket on it, filtered in the kernel to
// the forks that make a process, the exits of a process's first thread and
// execs; [Read] and [Drain] take datagrams off it, telling the kernel's own
// from forged ones; [Parse] turns one into a list of [Event]. What an event
// means for a process's keyrings is the server's to decide.
//
// Elsewhere there is no connector (conn_other.go): Subscribe returns nil,
// and the daemon learns a process's ancestry when it meets it.
package forks
