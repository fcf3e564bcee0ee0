package wire

import "github.com/ukeys/ukeys/keyctl"

// Op is an operation number: keyctl(2)'s where the kernel has one.
type Op uint16

// Operations. What each takes and answers is its entry in the table
// below ([SpecOf]).
const (
	OpGetKeyringID     Op = 0
	OpJoinSession      Op = 1
	OpUpdate           Op = 2
	OpRevoke           Op = 3
	OpChown            Op = 4
	OpSetPerm          Op = 5
	OpDescribe         Op = 6
	OpClear            Op = 7
	OpLink             Op = 8
	OpUnlink           Op = 9
	OpSearch           Op = 10
	OpRead             Op = 11
	OpInstantiate      Op = 12
	OpNegate           Op = 13
	OpSetReqKeyKeyring Op = 14
	OpSetTimeout       Op = 15
	OpAssumeAuthority  Op = 16
	OpGetSecurity      Op = 17
	OpSessionToParent  Op = 18
	OpReject           Op = 19
	OpInvalidate       Op = 21
	OpGetPersistent    Op = 22
	OpDHCompute        Op = 23
	OpPkeyQuery        Op = 24
	OpPkeyEncrypt      Op = 25
	OpPkeyDecrypt      Op = 26
	OpPkeySign         Op = 27
	OpPkeyVerify       Op = 28
	OpRestrictKeyring  Op = 29
	OpMove             Op = 30
	OpCapabilities     Op = 31
	OpWatchKey         Op = 32
	OpAddKey           Op = 1000
	OpRequestKey       Op = 1001
	OpProcKeys         Op = 1100
	OpProcKeyUsers     Op = 1101
	OpSysctlGet        Op = 1102
	OpSysctlSet        Op = 1103
	OpStatus           Op = 1104
	OpSessionAttach    Op = 1200
	OpSessionToken     Op = 1201
	OpWatchNext        Op = 1202
	OpIntercept        Op = 1203
	OpAddKeyCheck      Op = 1204
	OpTakeover         Op = 1205
)

// Shorthands for the table.
func integer(name string, reg int) Arg  { return Arg{Name: name, Kind: KindInt, Reg: reg} }
func str(name string, reg, max int) Arg { return Arg{Name: name, Kind: KindStr, Reg: reg, Max: max} }
func optStr(name string, reg, max int) Arg {
	return Arg{Name: name, Kind: KindOptStr, Reg: reg, Max: max}
}
func payload(name string, reg int) Arg { return Arg{Name: name, Kind: KindBytes, Reg: reg} }

var (
	none    = Result{}
	anID    = Result{Ints: 1}
	aBuffer = func(reg int) Result { return Result{Buf: true, BufReg: reg} }
	aText   = func(reg int) Result { return Result{Buf: true, BufReg: reg, Text: true} }
)

// specs is the table of operations: the one place that says what each
// takes and answers. Arguments are listed in the order of the system call
// that carries them (Reg is the argument's position in it); on the wire
// the integers and the buffers each keep that order.
var specs = []Spec{
	{Op: OpGetKeyringID, Name: "get_keyring_id", Sys: SysKeyctl, Result: anID,
		Args: []Arg{integer("id", 2), integer("create", 3)}},
	{Op: OpJoinSession, Name: "join_session_keyring", Sys: SysKeyctl, Result: anID,
		Args: []Arg{optStr("name", 2, 0)}}, // absent: an anonymous session
	{Op: OpUpdate, Name: "update", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), payload("payload", 3)}},
	{Op: OpRevoke, Name: "revoke", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2)}},
	{Op: OpChown, Name: "chown", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("uid", 3), integer("gid", 4)}},
	{Op: OpSetPerm, Name: "setperm", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("perm", 3)}},
	{Op: OpDescribe, Name: "describe", Sys: SysKeyctl, Result: aText(3), // "type;uid;gid;perm;desc"
		Args: []Arg{integer("id", 2)}},
	{Op: OpClear, Name: "clear", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("ring", 2)}},
	{Op: OpLink, Name: "link", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("ring", 3)}},
	{Op: OpUnlink, Name: "unlink", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("ring", 3)}},
	{Op: OpSearch, Name: "search", Sys: SysKeyctl, Result: anID,
		Args: []Arg{integer("ring", 2), str("type", 3, keyctl.MaxTypeName), str("description", 4, keyctl.MaxDescription), integer("dest", 5)}},
	{Op: OpRead, Name: "read", Sys: SysKeyctl, Result: aBuffer(3),
		Args: []Arg{integer("id", 2)}},
	{Op: OpInstantiate, Name: "instantiate", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), payload("payload", 3), integer("ring", 5)}},
	{Op: OpNegate, Name: "negate", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("timeout", 3), integer("ring", 4)}},
	{Op: OpSetReqKeyKeyring, Name: "set_reqkey_keyring", Sys: SysKeyctl, Result: anID, // the previous setting
		Args: []Arg{integer("setting", 2)}},
	{Op: OpSetTimeout, Name: "set_timeout", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("seconds", 3)}},
	{Op: OpAssumeAuthority, Name: "assume_authority", Sys: SysKeyctl, Result: anID,
		Args: []Arg{integer("id", 2)}},
	{Op: OpGetSecurity, Name: "get_security", Sys: SysKeyctl, Result: aText(3),
		Args: []Arg{integer("id", 2)}},
	{Op: OpSessionToParent, Name: "session_to_parent", Sys: SysKeyctl, Result: none},
	{Op: OpReject, Name: "reject", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("timeout", 3), integer("errno", 4), integer("ring", 5)}},
	{Op: OpInvalidate, Name: "invalidate", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2)}},
	{Op: OpGetPersistent, Name: "get_persistent", Sys: SysKeyctl, Result: anID,
		Args: []Arg{integer("uid", 2), integer("dest", 3)}},
	// The system call passes the three serials in a struct
	// keyctl_dh_params and the KDF in a struct keyctl_kdf_params, which an
	// interceptor reads itself (Indirect). The answer's integer is the
	// result's length, so that a buflen of 0 asks for the length only.
	{Op: OpDHCompute, Name: "dh_compute", Sys: SysKeyctl, Indirect: true, Result: Result{Ints: 1, Buf: true, BufReg: 3},
		Args: []Arg{integer("private", 0), integer("prime", 0), integer("base", 0), integer("buflen", 4),
			optStr("hash", 0, 0), payload("otherinfo", 0)}}, // hash absent: no KDF
	// The public-key operations. The query answers the kernel's struct
	// keyctl_pkey_query (56 bytes), which an interceptor copies to the
	// address in argument 5. The others take a struct keyctl_pkey_params
	// (the key, the input's and the output's lengths), the parameter
	// string ("enc=pkcs1 hash=sha256"), the input at argument 4 and the
	// output (or, for verify, the signature) at argument 5; encrypt,
	// decrypt and sign answer the output's length and the output, at
	// most out_len bytes.
	{Op: OpPkeyQuery, Name: "pkey_query", Sys: SysKeyctl, Result: Result{Ints: 1, Buf: true, BufReg: 5, Sized: true},
		Args: []Arg{integer("id", 2), integer("reserved", 3), str("info", 4, keyctl.MaxPkeyInfo)}},
	{Op: OpPkeyEncrypt, Name: "pkey_encrypt", Sys: SysKeyctl, Indirect: true, Result: Result{Ints: 1, Buf: true, BufReg: 5, Sized: true},
		Args: []Arg{integer("id", 0), str("info", 3, keyctl.MaxPkeyInfo), payload("in", 0), integer("out_len", 0)}},
	{Op: OpPkeyDecrypt, Name: "pkey_decrypt", Sys: SysKeyctl, Indirect: true, Result: Result{Ints: 1, Buf: true, BufReg: 5, Sized: true},
		Args: []Arg{integer("id", 0), str("info", 3, keyctl.MaxPkeyInfo), payload("in", 0), integer("out_len", 0)}},
	{Op: OpPkeySign, Name: "pkey_sign", Sys: SysKeyctl, Indirect: true, Result: Result{Ints: 1, Buf: true, BufReg: 5, Sized: true},
		Args: []Arg{integer("id", 0), str("info", 3, keyctl.MaxPkeyInfo), payload("in", 0), integer("out_len", 0)}},
	{Op: OpPkeyVerify, Name: "pkey_verify", Sys: SysKeyctl, Indirect: true, Result: none,
		Args: []Arg{integer("id", 0), str("info", 3, keyctl.MaxPkeyInfo), payload("data", 0), payload("sig", 0)}},
	{Op: OpRestrictKeyring, Name: "restrict_keyring", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), optStr("type", 3, 0), optStr("restriction", 4, 0)}},
	{Op: OpMove, Name: "move", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("from", 3), integer("to", 4), integer("flags", 5)}},
	{Op: OpCapabilities, Name: "capabilities", Sys: SysKeyctl, Result: Result{Buf: true, BufReg: 2, Partial: true}},
	// The kernel's watch queue descriptor (argument 3) has no counterpart:
	// events arrive through OpWatchNext on the same connection.
	{Op: OpWatchKey, Name: "watch_key", Sys: SysKeyctl, Result: none,
		Args: []Arg{integer("id", 2), integer("watch_id", 4)}},
	{Op: OpAddKey, Name: "add_key", Sys: SysAddKey, Result: anID,
		// A NULL description is none, as "" is (the asymmetric type
		// proposes one; the others refuse it with EINVAL).
		Args: []Arg{str("type", 1, keyctl.MaxTypeName), optStr("description", 2, keyctl.MaxDescription), payload("payload", 3), integer("ring", 5)}},
	{Op: OpRequestKey, Name: "request_key", Sys: SysRequestKey, Result: anID,
		Args: []Arg{str("type", 1, keyctl.MaxTypeName), str("description", 2, keyctl.MaxDescription), optStr("callout", 3, 0), integer("dest", 4)}},

	// The daemon's own operations, which no system call carries.
	{Op: OpProcKeys, Name: "proc_keys", Result: Result{Buf: true}},          // /proc/keys as the caller sees it
	{Op: OpProcKeyUsers, Name: "proc_key_users", Result: Result{Buf: true}}, // /proc/key-users
	{Op: OpSysctlGet, Name: "sysctl_get", Result: Result{Buf: true}},        // "name = value" lines
	{Op: OpSysctlSet, Name: "sysctl_set", Result: none,
		Args: []Arg{str("name", 0, 0), str("value", 0, 0)}},
	{Op: OpStatus, Name: "status", Result: Result{Buf: true}},
	// A token makes the connection's process possess a session keyring
	// (or act as a request-key helper): the answer is its serial.
	{Op: OpSessionAttach, Name: "session_attach", Result: anID,
		Args: []Arg{optStr("token", 0, 0)}}, // absent: a token that names nothing
	{Op: OpSessionToken, Name: "session_token", Result: Result{Ints: 1, Buf: true}},
	// The next notification: key, kind, aux, watch id.
	{Op: OpWatchNext, Name: "watch_next", Result: Result{Ints: 4}},
	// A seccomp listener, passed with the request (SCM_RIGHTS), whose
	// processes' add_key, keyctl and request_key calls the daemon is to
	// serve from now on (ukeyctl run).
	{Op: OpIntercept, Name: "intercept", Result: none},
	// add_key's answer as far as it does not depend on the payload's
	// bytes, for a payload of the given length (keys.Caller.AddKeyCheck):
	// a client asks before it sends a large payload, so that one the
	// daemon would refuse is never sent.
	{Op: OpAddKeyCheck, Name: "add_key_check", Result: none,
		Args: []Arg{str("type", 0, keyctl.MaxTypeName), str("description", 0, keyctl.MaxDescription), integer("length", 0), integer("ring", 0)}},
	// Another daemon takes over from this one (ukeyd -takeover): the
	// versions of the hand-over and of the keys' state stream it reads at
	// most. Once answered, the connection carries the hand-over
	// (server/handover.go), not frames.
	{Op: OpTakeover, Name: "takeover", Result: none,
		Args: []Arg{integer("handover_version", 0), integer("state_version", 0)}},
}
