package keys

import "github.com/ukeys/ukeys/keyctl"

// Perm is a key's permission mask ([keyctl.Perm]): four bytes for the
// possessor, the owning user, the owning group and everyone else.
type Perm = keyctl.Perm

// Rights within one byte of a [Perm].
const (
	View    = keyctl.View
	Read    = keyctl.Read
	Write   = keyctl.Write
	Search  = keyctl.Search
	Link    = keyctl.Link
	SetAttr = keyctl.SetAttr
	All     = keyctl.All
)

// Shifts of the four classes within a [Perm].
const (
	PossessorShift = keyctl.PossessorShift
	UserShift      = keyctl.UserShift
	GroupShift     = keyctl.GroupShift
	OtherShift     = keyctl.OtherShift
)

// Class masks, the mask of bits a caller may set, and the default masks
// of keys created by callers, as the kernel sets them.
const (
	PossAll           = keyctl.PossAll
	UserAll           = keyctl.UserAll
	GroupAll          = keyctl.GroupAll
	OtherAll          = keyctl.OtherAll
	PermMask          = keyctl.PermMask
	PermDefault       = keyctl.PermDefault
	PermLogon         = keyctl.PermLogon
	PermSessionAnon   = keyctl.PermSessionAnon
	PermSessionNamed  = keyctl.PermSessionNamed
	PermUserKeyring   = keyctl.PermUserKeyring
	PermThreadProcess = keyctl.PermThreadProcess
	PermPersistent    = keyctl.PermPersistent
	PermAuthKey       = keyctl.PermAuthKey
	PermRegister      = keyctl.PermRegister
)

// [NoGID] marks a key without a group (the kernel's INVALID_GID), shown as
// [OverflowID] in descriptions; OverflowID is what the kernel shows for an
// id that has no mapping.
const (
	NoGID      = keyctl.NoGID
	OverflowID = keyctl.OverflowID
)

// displayID renders an owner id as the kernel does: unmapped ids become
// the overflow id.
func displayID(id uint32) int64 {
	if id == NoGID {
		return OverflowID
	}
	return int64(id)
}

// permitted decides whether cred may exercise right on k, as the kernel's
// key_task_permission does: the owner gets the user byte only; a group
// member gets the group byte only if it is non-zero; anyone else gets the
// other byte; a possessor adds the possessor byte. There is no root
// bypass: capability rules live in the operations that have them.
func permitted(k *Key, cred *Cred, possessed bool, right Perm) bool {
	perm := Perm(k.perm.Load())
	var have Perm
	uid, gid := k.uid.Load(), k.gid.Load()
	switch {
	case uid == cred.UID:
		have = perm >> UserShift
	case gid != NoGID && perm&GroupAll != 0 && cred.inGroup(gid):
		have = perm >> GroupShift
	default:
		have = perm
	}
	if possessed {
		have |= perm >> PossessorShift
	}
	return have&right == right
}
