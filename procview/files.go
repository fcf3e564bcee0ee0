package procview

import (
	"errors"
	"strconv"

	"github.com/ukeys/ukeys/keys"
)

// Namespace is one key namespace as the files show it.
type Namespace struct {
	// Keys is the namespace's store: its key-users and its tunables.
	Keys *keys.Service
	// ProcKeys renders /proc/keys for thread tid of the reading process
	// cred.PID, with the keyrings the namespace keeps for that process
	// ([github.com/ukeys/ukeys/server.Server.ProcKeys]).
	ProcKeys func(cred keys.Cred, tid int) (string, error)
}

// Sysctls are the files of /proc/sys/kernel/keys that keyctl and
// keyutils read, in the kernel's order ([keys.SysctlNames]).
var Sysctls = keys.SysctlNames

// SysctlText is the content of sysctl name's file: the value and a
// newline, as the kernel's proc_dointvec prints it.
func SysctlText(t keys.Tunables, name string) (string, bool) {
	v, ok := t.Sysctl(name)
	if !ok {
		return "", false
	}
	return strconv.FormatInt(v, 10) + "\n", true
}

// SetSysctl sets tunable name of svc to v; a name that is no file
// fails ENOENT, a value out of range EINVAL ([keys.Tunables.WithSysctl],
// [keys.Service.SetTunables]).
func SetSysctl(svc *keys.Service, name string, v int64) error {
	t, err := svc.Tunables().WithSysctl(name, v)
	if err != nil {
		return err
	}
	return svc.SetTunables(t)
}

var errNotInt = errors.New("not one decimal integer")

// ParseInt parses what a writer wrote to a sysctl file as the kernel's
// proc_dointvec does for a file of one int: blanks around it, an
// optional minus, decimal digits, and nothing else.
func ParseInt(b []byte) (int64, error) {
	blank := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' }
	for len(b) > 0 && blank(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && blank(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 20 {
		return 0, errNotInt
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errNotInt
		}
		if v > (1<<62)/5 {
			return 0, errNotInt
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, nil
}
