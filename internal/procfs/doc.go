// Package procfs parses what the daemon reads of a task in Linux's
// /proc: the credentials and thread group in /proc/<pid>/status
// ([Status]), and the parent, session and start time in /proc/<pid>/stat
// ([Stat]). It reads text the kernel writes, but a process names itself
// (the Name line, the command name in stat), so the parser takes nothing
// on trust: a line it cannot read makes the whole file unreadable rather
// than partly believed.
package procfs
