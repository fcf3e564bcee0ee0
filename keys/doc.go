// Package keys is ukeys' key retention model: the Linux kernel's keys and
// keyrings, their permissions, possession, searches, quotas, expiry,
// revocation and request-key construction, in process and in user space.
// Everything the daemon serves is decided here; a program may also use it
// directly.
//
// # Model
//
// A [Service] owns every key: the serial index, the registry of key types
// ("user", "logon", "keyring", "encrypted" built in; more through
// [Register], such as package keys/bigkey's "big_key" and package
// keys/asymmetric's "asymmetric"), the per-user quota records and the
// tunables of /proc/sys/kernel/keys. A [Caller] is one client process: its
// credentials (uid, gid, groups, pid) and its thread, process and session
// keyrings, exactly what the kernel keeps in a task's cred. Operations are
// [Caller] methods named and numbered after keyctl(2): [Caller.AddKey],
// [Caller.RequestKey], [Caller.Read], [Caller.Update], [Caller.Revoke],
// [Caller.Invalidate], [Caller.SetTimeout], [Caller.Link],
// [Caller.Unlink], [Caller.Move], [Caller.Search], [Caller.Clear],
// [Caller.Describe], [Caller.SetPerm], [Caller.Chown],
// [Caller.Instantiate], [Caller.Negate], [Caller.Reject],
// [Caller.JoinSessionKeyring], [Caller.GetPersistent],
// [Caller.RestrictKeyring], [Caller.WatchKey]. Special ids
// ([ThreadKeyring] … [RequestorKeyring]) name the caller's keyrings as
// KEY_SPEC_* do.
//
// Errors are [Errno] values with the kernel's numbers and the C library's
// texts ([ENOKEY], [EKEYEXPIRED], [EKEYREVOKED], [EKEYREJECTED], [EDQUOT],
// [EACCES], [ENOTDIR], [EDEADLK], [ELOOP]…), wrapped with the operation and
// comparable with [errors.Is]. The order in which the kernel checks things
// is kept: a revoked or expired key reports that before any permission
// failure, and searches prefer EKEYREVOKED over EKEYEXPIRED over ENOKEY as
// the kernel does.
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
// that searches walk while writers build the next version (its leaves
// name keys by their position in the service's registry of keys, not by
// pointer, which keeps them out of the Go collector's scan); payloads are
// published with an atomic pointer and a replaced or revoked payload is
// wiped only after an rcu grace period, so a reader that loaded it sees it
// intact until it lets go. A key whose last reference goes (its last link
// removed, its last holder released) leaves the serial index and is
// destroyed after a grace period: payload wiped, quota returned. A link
// removed from a keyring (unlinked, displaced, cleared) keeps holding its
// key for [DefaultReleaseDelay], until the collector drops it, as the
// kernel's removed link does until its RCU callback: in that window the
// key is still found by serial, possessed by no one (gc_release.go).
//
// # Hand-over
//
// A Service writes everything it holds as a state stream ([Service.Export]:
// state_export.go), which a Service made anew reads ([Import],
// state_import.go): every key with its serial, owner, permissions, flags,
// state, expiry and payload, every keyring's links slot for slot, the
// restrictions and the special keyrings; callers come back through
// [Restore.Caller]. The stream is versioned ([StateVersion]; every earlier
// version reads), written key by key as each key's place is known, so
// that a reader at the other end of a pipe keeps pace, and read as
// hostile input: bounded, every reference checked, no loop of keyrings,
// quota worked out again. The daemon uses it to hand over to the daemon
// that replaces it.
//
// # Garbage collection
//
// The collector (gc.go) reaps keys: it prunes the links to keys that have
// died and destroys keys that nothing references any more. It runs as one
// work item on a workqueue (its own, or the one [WithGCTuning] names), which
// never runs concurrently with itself, and every item does a bounded amount
// of work, at most the chunk size ([DefaultChunkSize]; WithGCTuning changes
// it for benchmarks) in units of keys examined, links visited or pruned and
// keys destroyed, then reschedules itself if work is left. Its state (a
// cursor into the serial index, the sweeps under way, the batch waiting to
// be destroyed) lives between items, and no lock is held across them, so
// that a pass over a million keys never stalls the workqueue or a writer.
// Every loop reports an rcu quiescent state per key or node, so that grace
// periods do not wait for an item to end.
//
// A key dies when it is invalidated, when its type is unregistered, or,
// gc_delay ([Tunables.GCDelay]) after it expired or was revoked;
// [ReapReason] names why. A pass is asked for by whoever makes a key die
// (invalidation and unregistration at once, expiry through a timer armed for
// the earliest expiry plus gc_delay) and by whoever buries a key; a request
// made during a pass is remembered and served by the next. The references of
// links removed by callers are dropped by the collector too, a chunk at a
// time, once their release delay has passed (gc_release.go).
//
// A pass has three phases, one file each:
//
//   - Scan (gc_scan.go) walks the serial index a chunk at a time from a
//     saved cursor, in the order of its registry of keys (the order they
//     were indexed, a freed position going to a later key): a key keeps
//     its position while it is indexed, so every key indexed for the
//     whole pass is seen once. For
//     each dead key the scan looks up the keyrings that link it (each key
//     records its parents, so the cost is proportional to its own links,
//     not to the number of keyrings) and routes each link to the prune
//     phase. For a live key it notes the earliest expiry still to come.
//   - Prune (gc_prune.go) removes the links. Links in small keyrings are
//     batched by keyring, so that a keyring is locked once per chunk and
//     gets one new version for all of its dead links. Large keyrings
//     (sweepMinLinks links or more) are handled differently: removing one
//     link copies the path to it in the keyring's trie, and in a keyring
//     of a million links every node on that path is a cache miss, so while
//     few of its links are known dead they are deferred and pruned one by
//     one after the scan, and once at least one in sweepShare is dead the
//     keyring is swept instead (gc_sweep.go): a walk over its trie that
//     touches each node once and drops whole subtrees whose links all
//     died without copying them, the kernel's keyring_gc done in bounded
//     steps. A step resumes at a position in the trie's in-order walk;
//     links added behind the position wait for the next pass, and a part
//     of the trie visited twice (after it collapsed into a leaf) is
//     harmless, since removing the dead is idempotent. A link removed
//     drops its reference to the key; a key that loses its last one is
//     buried.
//   - Destroy (gc_destroy.go) frees buried keys. A key whose last
//     reference goes leaves the serial index at once and waits in the
//     graveyard. When a pass ends, the graveyard becomes the batch to
//     destroy and a grace period starts; once it has passed (the item is
//     rescheduled by an rcu callback, never blocked waiting), the keys
//     are destroyed a chunk at a time: payload wiped and released,
//     watches told, links of a keyring dropped, quota returned to the
//     owners, gathered per owner so that each chunk takes an owner's lock
//     once.
//
// Unregistering a type ([Service.UnregisterType]) takes three passes, as
// in the kernel: the first marks the type's keys dead and clears their
// permissions, the second prunes links that appeared while the first
// ran, and the third takes the payloads of keys still referenced, which
// then remain as keys of the type ".dead". UnregisterType returns after
// the third. [Service.WaitGC] waits until every key buried so far has been
// destroyed; [GCStats] reports the collector's counters and latencies.
package keys
