// Command ukeyd is the ukeys daemon: it serves keys, keyrings and
// request-key upcalls to the processes of every user on a Unix socket,
// learning each caller from the socket itself.
//
// Usage:
//
//	ukeyd [flags]
//
// With no flags it listens on the default socket ($UKEYS_SOCKET, or
// /run/ukeys/ukeyd.sock for root (/var/run/ukeys/ukeyd.sock on macOS and
// FreeBSD), or $XDG_RUNTIME_DIR/ukeys/ukeyd.sock).
// SIGTERM and SIGINT stop it cleanly. SIGHUP is logged and changes
// nothing else: the request-key helper reads its configuration at every
// upcall, so an edit applies to the next one without a signal.
package main
