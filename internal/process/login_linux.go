package process

import (
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/internal/procfs"
)

// LoginSupported: the daemon reads logins from /proc and follows their
// anchors by pidfd.
const LoginSupported = true

// noAuditSession is what /proc/<pid>/sessionid holds for a process of no
// audit session: (u32)-1, the kernel's AUDIT_SID_UNSET.
const noAuditSession = 1<<32 - 1

// Login returns the login of process pid: its audit session id (audit
// true) if the system set one, else its POSIX session id.
func Login(pid int) (id uint64, audit, ok bool) {
	if b, err := procfs.ReadFile("/proc/" + strconv.Itoa(pid) + "/sessionid"); err == nil {
		if id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && id != noAuditSession {
			return id, true, true
		}
	}
	st, ok := procfs.ReadStat(pid)
	if !ok || st.SID <= 0 {
		return 0, false, false
	}
	return uint64(st.SID), false, true
}

// EffectiveUID returns the effective uid process pid runs as.
func EffectiveUID(pid int) (uint32, bool) {
	st, ok := procfs.ReadStatus(pid)
	return st.UIDs[1], ok
}
