package peer

import (
	"reflect"
	"testing"
)

// What LOCAL_PEERCRED reports becomes the caller's credentials: the first
// group is the effective gid, the rest up to ngroups the supplementary
// groups; a layout the daemon does not know, or no groups at all, is an
// error rather than a guess.
func TestXucredCred(t *testing.T) {
	groups := make([]uint32, 16) // XU_NGROUPS
	copy(groups, []uint32{20, 12, 61, 79})
	for _, c := range []struct {
		name    string
		version uint32
		ngroups int
		pid     int
		want    Cred
		err     bool
	}{
		{"egid and three groups", 0, 4, 501, Cred{UID: 501, GID: 20, PID: 501, Groups: []uint32{12, 61, 79}}, false},
		{"egid only", 0, 1, 7, Cred{UID: 501, GID: 20, PID: 7}, false},
		{"every slot", 0, 16, 7, Cred{UID: 501, GID: 20, PID: 7, Groups: groups[1:]}, false},
		{"pid unknown", 0, 1, 0, Cred{UID: 501, GID: 20}, false},
		{"negative pid", 0, 1, -1, Cred{UID: 501, GID: 20}, false},
		{"no groups", 0, 0, 7, Cred{}, true},
		{"more groups than slots", 0, 17, 7, Cred{}, true},
		{"negative count", 0, -1, 7, Cred{}, true},
		{"unknown version", 1, 4, 7, Cred{}, true},
	} {
		got, err := xucredCred(c.version, 501, c.ngroups, groups, c.pid)
		if (err != nil) != c.err || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, %v; want %+v, error %v", c.name, got, err, c.want, c.err)
		}
	}
	// The groups are the caller's own copy, not the kernel's buffer.
	got, _ := xucredCred(0, 501, 2, groups, 1)
	groups[1] = 0
	if got.Groups[0] != 12 {
		t.Error("the groups alias the xucred")
	}
	groups[1] = 12
}
