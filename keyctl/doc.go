// Package keyctl is the vocabulary that the kernel's
// include/uapi/linux/keyctl.h gives programs, shared by every part of
// ukeys that speaks about keys without holding them: key serials and the
// special keyring ids, permission masks, the errno values and their
// texts, notification kinds and capability bits.
//
// It imports nothing of the project, so that a client (the client
// package, ukeyctl) links none of the key retention model, its collector
// or the rcu engine under it. Package keys uses these same types.
package keyctl
