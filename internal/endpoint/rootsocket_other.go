//go:build !linux

package endpoint

// rootSocket is where a root daemon listens by default: under /var/run,
// where macOS and the BSDs keep runtime state (macOS has no /run, and its
// read-only system volume would not let the daemon make one).
const rootSocket = "/var/run/ukeys/ukeyd.sock"
