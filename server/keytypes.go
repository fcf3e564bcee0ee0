package server

// The daemon serves every type the kernel's keyrings offer, big_key
// among them: its capabilities advertise big_key (keyctl.CapBigKey) and
// its Limits bound big_key's files, so every Service a Server makes must
// have the type, which its package registers with keys (keys.Register)
// when imported.
import _ "github.com/ukeys/ukeys/keys/bigkey"
