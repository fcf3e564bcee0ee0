package server

// The daemon serves every type the kernel's keyrings offer, each
// registered with keys ([keys.Register]) by its package when imported, so
// that every Service a [Server] makes has them: big_key, which its
// capabilities advertise (keyctl.CapBigKey) and its [Limits] bound the
// files of, and asymmetric, whose pkey operations, restrictions and
// trusted keyrings it serves and whose costly parsing it bounds.
import (
	_ "github.com/ukeys/ukeys/keys/asymmetric"
	_ "github.com/ukeys/ukeys/keys/bigkey"
)
