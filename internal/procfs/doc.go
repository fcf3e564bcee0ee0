// Package procfs parses what the daemon reads of a task in Linux's
// /proc: the credentials and thread group in /proc/<pid>/status. It
// reads text the kernel writes, but a process names itself (the Name
// line), so the parser takes nothing on trust: a line it cannot read
// makes the whole status unreadable rather than partly believed.
package procfs
