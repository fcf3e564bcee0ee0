package container

import (
	"errors"

	"github.com/ukeys/ukeys/internal/process"
)

// Record is an [Identity] as a hand-over carries it to the next daemon:
// the namespaces' nsfs devices and inodes.
type Record struct {
	PidDev uint64 `json:"pid_dev"`
	PidIno uint64 `json:"pid_ino"`
	MntDev uint64 `json:"mnt_dev,omitempty"`
	MntIno uint64 `json:"mnt_ino,omitempty"`
}

// Record returns c's record.
func (c Identity) Record() Record {
	var r Record
	r.PidDev, r.PidIno = c.pidNS.Parts()
	r.MntDev, r.MntIno = c.mntNS.Parts()
	return r
}

// Rebind returns the identity a record says, checked against the
// container's init (a handle the hand-over carried as a pidfd, which no
// reused pid can fool): the init must live, and be in the container
// the record names, and still live once that has been read (so that
// what was read is that process's). A record that names neither
// namespace is refused, as [Of] refuses such a container.
func Rebind(r Record, init *process.Handle) (Identity, error) {
	who := Identity{pidNS: process.MakeNSID(r.PidDev, r.PidIno)}
	if r.MntDev != 0 || r.MntIno != 0 {
		who.mntNS = process.MakeNSID(r.MntDev, r.MntIno)
	}
	if r.PidDev == 0 && r.PidIno == 0 {
		return Identity{}, errNoNamespace
	}
	if init.PID() <= 0 || init.Exited() {
		return Identity{}, errors.New("the container's init has exited")
	}
	if !who.Holds(init.PID()) {
		return Identity{}, errors.New("the container's init is not in the namespaces the record names")
	}
	if init.Exited() {
		return Identity{}, errors.New("the container's init has exited")
	}
	return who, nil
}
