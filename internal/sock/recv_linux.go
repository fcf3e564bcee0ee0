package sock

import "golang.org/x/sys/unix"

// recvFlags makes received descriptors close-on-exec as they arrive.
const recvFlags = unix.MSG_CMSG_CLOEXEC
