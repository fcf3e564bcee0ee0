// Command ukeyctl is a drop-in replacement for keyutils' keyctl(1) that
// talks to the ukeys daemon (ukeyd) instead of the kernel's keyrings.
//
// It follows keyutils 1.6.3 keyctl byte for byte: the same commands, the
// same argument parsing, the same output formats, error messages and exit
// codes (0 success, 1 an operation failed, 2 a usage error, 3 an
// unparsable description or an unknown capability). Installed or linked
// under the name keyctl it behaves the same; only the usage text differs,
// which lists ukeyctl's extra commands when invoked as ukeyctl:
//
//	ukeyctl proc keys              the daemon's /proc/keys view
//	ukeyctl proc key-users         the daemon's /proc/key-users view
//	ukeyctl sysctl [name[=value]]  the daemon's /proc/sys/kernel/keys
//	ukeyctl status                 the daemon's state (for root, the seccomp
//	                               agent's key namespaces too)
//	ukeyctl request-key <op> <key> <uid> <gid> <thread> <process> <session>
//	                               the request-key upcall helper (as
//	                               request-key(8), see requestkey.go)
//	ukeyctl run [--] <program> [<args>...]
//	                               run a program whose own key system calls
//	                               ukeyd serves (seccomp user notification)
//	ukeyctl seccomp-profile [--listener <path>] [--output <file>] [--base default | <profile>]
//	                               a runtime's seccomp profile that hands the
//	                               key calls to ukeyd's agent
//	ukeyctl oci-runtime [--listener <path>] [--runtime <runtime>] [--new-keyring] -- <args>...
//	                               an OCI runtime wrapper that names the agent
//	                               for engines that drop listenerPath, and
//	                               makes the agent's containers no kernel
//	                               session keyring
//
// ukeyctl connects to the daemon's socket ([client.DefaultSocket], or
// $UKEYS_SOCKET). If nothing answers there it starts ukeyd (found next to
// the ukeyctl binary or in $PATH) in the background and says so once on
// stderr; UKEYS_NO_AUTOSTART=1 turns that off.
//
// Session keyrings cross process boundaries by token: `ukeyctl session`
// joins a session keyring and execs the shell or program with the token in
// $UKEYS_SESSION, so that every ukeyctl started below it possesses that
// session keyring, as the children of `keyctl session` do. The daemon
// keeps the session while the program (the same process) runs.
package main
