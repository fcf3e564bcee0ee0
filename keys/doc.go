// Package keys is ukeys' key retention model: the Linux kernel's keys and
// keyrings, their permissions, possession, searches, quotas, expiry,
// revocation and request-key construction, in process and in user space.
// Everything the daemon serves is decided here; a program may also use it
// directly.
//
// # Model
//
// A Service owns every key: the serial index, the registry of key types
// ("user", "logon", "keyring", "big_key" built in), the per-user quota
// records and the tunables of /proc/sys/kernel/keys. A Caller is one
// client process: its credentials (uid, gid, groups, pid) and its thread,
// process and session keyrings, exactly what the kernel keeps in a task's
// cred. Operations are Caller methods named and numbered after keyctl(2):
// AddKey, RequestKey, Read, Update, Revoke, Invalidate, SetTimeout, Link,
// Unlink, Move, Search, Clear, Describe, SetPerm, Chown, Instantiate,
// Negate, Reject, JoinSessionKeyring, GetPersistent, RestrictKeyring,
// WatchKey. Special ids (ThreadKeyring … RequestorKeyring) name the
// caller's keyrings as KEY_SPEC_* do.
//
// Errors are Errno values with the kernel's numbers and the C library's
// texts (ENOKEY, EKEYEXPIRED, EKEYREVOKED, EKEYREJECTED, EDQUOT, EACCES,
// ENOTDIR, EDEADLK, ELOOP…), wrapped with the operation and comparable
// with errors.Is. The order in which the kernel checks things is kept:
// a revoked or expired key reports that before any permission failure,
// and searches prefer EKEYREVOKED over EKEYEXPIRED over ENOKEY as the
// kernel does.
//
// # Permissions and possession
//
// A key's mask has a byte each for the possessor, the owner, the group and
// everyone else. The owner gets the user byte only, a member of the key's
// group the group byte (if it is not empty), anyone else the other byte;
// a caller that possesses the key (reaches it through searchable links
// from its thread, process or session keyring, or, as a request-key helper,
// from its requestor's) adds the possessor byte. There is no root bypass of
// the bits; root (uid 0) only gets the capability rules of chown, setperm
// and get_persistent.
//
// # Concurrency
//
// Readers never lock. A keyring's links live in a persistent hash trie
// that searches walk while writers build the next version; payloads are
// published with an atomic pointer and a replaced or revoked payload is
// wiped only after an rcu grace period, so a reader that loaded it sees it
// intact until it lets go. A key whose last reference goes (its last link
// removed, its last holder released) leaves the serial index and is
// destroyed after a grace period: payload wiped, quota returned.
package keys
