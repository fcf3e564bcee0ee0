package keys

import "time"

// SysctlNames are the files of the kernel's /proc/sys/kernel/keys that
// hold [Tunables], in the order the kernel lists them: what keyctl and
// keyutils read, and what a daemon serves for them (KEYCTL_SYSCTL-like
// requests, a container's view of its namespace).
var SysctlNames = []string{"gc_delay", "maxbytes", "maxkeys", "persistent_keyring_expiry", "root_maxbytes", "root_maxkeys"}

// Sysctl returns the value file name of /proc/sys/kernel/keys shows for
// t (durations in whole seconds), or false for a name that is none of
// [SysctlNames].
func (t Tunables) Sysctl(name string) (int64, bool) {
	switch name {
	case "gc_delay":
		return int64(t.GCDelay / time.Second), true
	case "maxkeys":
		return int64(t.MaxKeys), true
	case "maxbytes":
		return int64(t.MaxBytes), true
	case "root_maxkeys":
		return int64(t.RootMaxKeys), true
	case "root_maxbytes":
		return int64(t.RootMaxBytes), true
	case "persistent_keyring_expiry":
		return int64(t.PersistentExpiry / time.Second), true
	}
	return 0, false
}

// WithSysctl returns t with file name of /proc/sys/kernel/keys set to v,
// as a write of v to that file sets it: ENOENT for a name that is none
// of [SysctlNames], EINVAL for a value beyond a C int (the files are
// ints). Whether the value is in the tunable's range is
// [Service.SetTunables]'s to say.
func (t Tunables) WithSysctl(name string, v int64) (Tunables, error) {
	const intMax = 1<<31 - 1
	if v < -intMax-1 || v > intMax {
		return t, EINVAL
	}
	switch name {
	case "gc_delay":
		t.GCDelay = time.Duration(v) * time.Second
	case "maxkeys":
		t.MaxKeys = int(v)
	case "maxbytes":
		t.MaxBytes = int(v)
	case "root_maxkeys":
		t.RootMaxKeys = int(v)
	case "root_maxbytes":
		t.RootMaxBytes = int(v)
	case "persistent_keyring_expiry":
		t.PersistentExpiry = time.Duration(v) * time.Second
	default:
		return t, ENOENT
	}
	return t, nil
}
