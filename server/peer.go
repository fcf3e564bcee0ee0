package server

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
)

// peerCred learns who is at the other end of a Unix socket from the kernel
// (SO_PEERCRED), never from anything the client says.
func peerCred(c *net.UnixConn) (keys.Cred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return keys.Cred{}, err
	}
	var uc *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		uc, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return keys.Cred{}, err
	}
	if serr != nil {
		return keys.Cred{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	cred := keys.Cred{UID: uc.Uid, GID: uc.Gid, PID: int(uc.Pid)}
	cred.Groups = supplementaryGroups(int(uc.Pid))
	return cred, nil
}

// supplementaryGroups reads a process's groups from /proc. A process that
// has gone, or a host without /proc, yields none: the kernel's own check
// would then see only the primary group.
func supplementaryGroups(pid int) []uint32 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, field := range strings.Fields(line) {
			if g, err := strconv.ParseUint(field, 10, 32); err == nil {
				out = append(out, uint32(g))
			}
		}
		return out
	}
	return nil
}
