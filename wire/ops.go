package wire

// Op is an operation number: keyctl(2)'s where the kernel has one.
type Op uint16

// Operations. Arguments are listed as ints / bufs, results likewise.
const (
	OpGetKeyringID     Op = 0    // id, create / – → id
	OpJoinSession      Op = 1    // – / name (absent: anonymous) → id
	OpUpdate           Op = 2    // id / payload → –
	OpRevoke           Op = 3    // id → –
	OpChown            Op = 4    // id, uid, gid → –
	OpSetPerm          Op = 5    // id, perm → –
	OpDescribe         Op = 6    // id → – / "type;uid;gid;perm;desc"
	OpClear            Op = 7    // ring → –
	OpLink             Op = 8    // id, ring → –
	OpUnlink           Op = 9    // id, ring → –
	OpSearch           Op = 10   // ring, dest / type, desc → id
	OpRead             Op = 11   // id → – / payload
	OpInstantiate      Op = 12   // id, ring / payload → –
	OpNegate           Op = 13   // id, timeout, ring → –
	OpSetReqKeyKeyring Op = 14   // setting → previous
	OpSetTimeout       Op = 15   // id, seconds → –
	OpAssumeAuthority  Op = 16   // id → id
	OpGetSecurity      Op = 17   // id → – / label
	OpSessionToParent  Op = 18   // – → –
	OpReject           Op = 19   // id, timeout, errno, ring → –
	OpInvalidate       Op = 21   // id → –
	OpGetPersistent    Op = 22   // uid, dest → id
	OpDHCompute        Op = 23   // private, prime, base, buflen / hash (absent: no KDF), otherinfo → length / result
	OpRestrictKeyring  Op = 29   // id / type, restriction → –
	OpMove             Op = 30   // id, from, to, flags → –
	OpCapabilities     Op = 31   // – → – / capability bytes
	OpWatchKey         Op = 32   // id, watch id → –
	OpAddKey           Op = 1000 // ring / type, desc, payload → id
	OpRequestKey       Op = 1001 // dest / type, desc, callout (absent: none) → id
	OpProcKeys         Op = 1100 // – → – / /proc/keys text
	OpProcKeyUsers     Op = 1101 // – → – / /proc/key-users text
	OpSysctlGet        Op = 1102 // – → – / "name=value\n"…
	OpSysctlSet        Op = 1103 // – / name, value → –
	OpStatus           Op = 1104 // – → – / status text
	OpSessionAttach    Op = 1200 // – / token → id: present a session token
	OpSessionToken     Op = 1201 // – → – / token for the current session
	OpWatchNext        Op = 1202 // – → key, kind, aux, watch id: next notification
)

var opNames = map[Op]string{
	OpGetKeyringID: "get_keyring_id", OpJoinSession: "join_session_keyring", OpUpdate: "update",
	OpRevoke: "revoke", OpChown: "chown", OpSetPerm: "setperm", OpDescribe: "describe",
	OpClear: "clear", OpLink: "link", OpUnlink: "unlink", OpSearch: "search", OpRead: "read",
	OpInstantiate: "instantiate", OpNegate: "negate", OpSetReqKeyKeyring: "set_reqkey_keyring",
	OpSetTimeout: "set_timeout", OpAssumeAuthority: "assume_authority", OpGetSecurity: "get_security",
	OpSessionToParent: "session_to_parent", OpReject: "reject", OpInvalidate: "invalidate",
	OpGetPersistent: "get_persistent", OpDHCompute: "dh_compute", OpRestrictKeyring: "restrict_keyring",
	OpMove: "move", OpCapabilities: "capabilities", OpWatchKey: "watch_key", OpAddKey: "add_key",
	OpRequestKey: "request_key", OpProcKeys: "proc_keys", OpProcKeyUsers: "proc_key_users",
	OpSysctlGet: "sysctl_get", OpSysctlSet: "sysctl_set", OpStatus: "status",
	OpSessionAttach: "session_attach", OpSessionToken: "session_token", OpWatchNext: "watch_next",
}

// String names the operation (for logs and metrics labels).
func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return "unknown"
}

// Known reports whether o is an operation this version defines.
func (o Op) Known() bool { _, ok := opNames[o]; return ok }
