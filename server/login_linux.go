package server

import (
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/internal/procfs"
)

// loginSupported: the daemon reads logins from /proc and follows their
// anchors by pidfd.
const loginSupported = true

// noAuditSession is what /proc/<pid>/sessionid holds for a process of no
// audit session: (u32)-1, the kernel's AUDIT_SID_UNSET.
const noAuditSession = 1<<32 - 1

// loginOf returns the login of process pid: its audit session id if the
// system set one, else its POSIX session id.
func loginOf(pid int) (loginID, bool) {
	if b, err := procfs.ReadFile("/proc/" + strconv.Itoa(pid) + "/sessionid"); err == nil {
		if id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && id != noAuditSession {
			return loginID{audit: true, id: id}, true
		}
	}
	st, ok := procfs.ReadStat(pid)
	if !ok || st.SID <= 0 {
		return loginID{}, false
	}
	return loginID{id: uint64(st.SID)}, true
}

// effectiveUID returns the effective uid process pid runs as.
func effectiveUID(pid int) (uint32, bool) {
	st, ok := procfs.ReadStatus(pid)
	return st.UIDs[1], ok
}
