package keyctl

import "strings"

// Perm is a key's permission mask: four bytes for the possessor, the
// owning user, the owning group and everyone else, each made of the six
// rights below. The layout is the kernel's, so masks written for keyctl
// setperm mean the same here.
type Perm uint32

// Rights within one byte of a [Perm].
const (
	View    Perm = 0x01 // see the key's attributes
	Read    Perm = 0x02 // read the payload, list a keyring
	Write   Perm = 0x04 // update the payload, add or remove links
	Search  Perm = 0x08 // find the key by searching, search a keyring
	Link    Perm = 0x10 // link the key into a keyring
	SetAttr Perm = 0x20 // change owner, group, permissions, timeout
	All     Perm = 0x3f
)

// Shifts of the four classes within a [Perm].
const (
	PossessorShift = 24
	UserShift      = 16
	GroupShift     = 8
	OtherShift     = 0
)

// Class masks, and the mask of bits a caller may set.
const (
	PossAll  = All << PossessorShift
	UserAll  = All << UserShift
	GroupAll = All << GroupShift
	OtherAll = All << OtherShift
	// PermMask holds every bit that KEYCTL_SETPERM accepts.
	PermMask Perm = 0x3f3f3f3f
)

// Default masks of keys created by callers, as the kernel sets them.
const (
	// PermDefault: possessor everything, user view (user, keyring, big_key).
	PermDefault Perm = 0x3f010000
	// PermLogon: as [PermDefault] without possessor read.
	PermLogon Perm = 0x3d010000
	// PermSessionAnon is the anonymous session keyring's (_ses).
	PermSessionAnon Perm = 0x3f030000
	// PermSessionNamed is a named session keyring's.
	PermSessionNamed Perm = 0x3f130000
	// PermUserKeyring is _uid.N's and _uid_ses.N's.
	PermUserKeyring Perm = 0x1f3f0000
	// PermThreadProcess is _tid's and _pid's.
	PermThreadProcess Perm = 0x3f010000
	// PermPersistent is _persistent.N's and the persistent register's.
	PermPersistent Perm = 0x1f030000
	// PermAuthKey is a request-key authorisation key's.
	PermAuthKey Perm = 0x1b010000
	// PermRegister is the per-service user register's (.user_reg).
	PermRegister Perm = 0x0c030000
)

// String renders the mask as keyctl describe does: four groups of
// "alswrv" (setattr, link, search, write, read, view) for possessor,
// user, group and other, with '-' for rights not granted.
func (p Perm) String() string {
	var b strings.Builder
	b.Grow(24)
	for _, shift := range []uint{PossessorShift, UserShift, GroupShift, OtherShift} {
		byt := (p >> shift) & All
		for i, c := range "alswrv" {
			if byt&(0x20>>i) != 0 {
				b.WriteRune(c)
			} else {
				b.WriteByte('-')
			}
		}
	}
	return b.String()
}

// NoGID marks a key without a group (the kernel's INVALID_GID), shown as
// [OverflowID] in descriptions.
const NoGID = ^uint32(0)

// OverflowID is what the kernel shows for an id that has no mapping.
const OverflowID = 65534
