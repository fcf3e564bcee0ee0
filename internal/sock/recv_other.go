//go:build !linux

package sock

// recvFlags: no MSG_CMSG_CLOEXEC here; keep sets close-on-exec itself.
const recvFlags = 0
