package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// floorSource is the syscall scenario's baseline: the least a supervisor
// of seccomp user notifications can do for a caller's keyctl_read, in C.
// It receives the listener as the daemon does (SCM_RIGHTS from the
// caller's intercept.HandOff, on its descriptor 3), asks for
// SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, and answers each KEYCTL_READ with
// 16 fixed bytes written into the caller (process_vm_writev) and 16,
// add_key with a fixed key id, and lets the kernel run anything else the
// filter hands it. No credentials, no check that the call is still
// pending, no key service: what is left of an intercepted call once
// ukeys' own work is taken away.
const floorSource = `#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1
#endif

int main(void) {
	char byte, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&byte, 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	if (recvmsg(3, &msg, MSG_CMSG_CLOEXEC) < 0) {
		perror("floor: recvmsg");
		return 1;
	}
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c == NULL || c->cmsg_type != SCM_RIGHTS) {
		fprintf(stderr, "floor: no listener came with the message\n");
		return 1;
	}
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) < 0) {
		perror("floor: SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP");
		return 1;
	}
	if (write(1, "r", 1) != 1)
		return 1;
	static char payload[16] = "0123456789abcdef";
	for (;;) {
		struct seccomp_notif n;
		struct seccomp_notif_resp r;
		memset(&n, 0, sizeof n);
		if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &n) < 0) {
			if (errno == EINTR)
				continue;
			if (errno != ENOENT) {
				perror("floor: receive");
				return 1;
			}
			/* No call: its caller went, or every task under the filter. */
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return 1;
			if ((p.revents & POLLHUP) && !(p.revents & POLLIN))
				return 0;
			continue;
		}
		memset(&r, 0, sizeof r);
		r.id = n.id;
		if (n.data.nr == SYS_keyctl && n.data.args[0] == KEYCTL_READ) {
			size_t len = n.data.args[3] < 16 ? n.data.args[3] : 16;
			struct iovec local = {payload, len}, remote = {(void *)n.data.args[2], len};
			if (process_vm_writev(n.pid, &local, 1, &remote, 1, 0) == (ssize_t)len)
				r.val = 16;
			else
				r.error = -EFAULT;
		} else if (n.data.nr == SYS_add_key) {
			r.val = 1;
		} else {
			r.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		}
		if (ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &r) < 0 && errno != ENOENT) {
			perror("floor: send");
			return 1;
		}
	}
}
`

// errNoCC says why the floor is not measured.
var errNoCC = errors.New("no C compiler (cc) on PATH")

// buildFloor compiles floorSource into dir, returning the program's path.
func buildFloor(dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", errNoCC
	}
	src, bin := filepath.Join(dir, "floor.c"), filepath.Join(dir, "floor")
	if err := os.WriteFile(src, []byte(floorSource), 0o600); err != nil {
		return "", err
	}
	out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v: %s", cc, err, bytes.TrimSpace(out))
	}
	return bin, nil
}
