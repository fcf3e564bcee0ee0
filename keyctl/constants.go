package keyctl

import "time"

// Capability bits of KEYCTL_CAPABILITIES: the first byte, then the
// second.
const (
	CapCapabilities   = 0x01
	CapPersistent     = 0x02
	CapDH             = 0x04
	CapPublicKey      = 0x08
	CapBigKey         = 0x10
	CapInvalidate     = 0x20
	CapRestrict       = 0x40
	CapMove           = 0x80
	Cap2NSKeyringName = 0x01
	Cap2NSKeyTag      = 0x02
	Cap2Notifications = 0x04
)

// MoveExcl makes KEYCTL_MOVE fail with [EEXIST] if the destination keyring
// holds a key of the same type and description (KEYCTL_MOVE_EXCL).
const MoveExcl = 1

// MaxKDFOutput bounds the output of KEYCTL_DH_COMPUTE with a KDF
// (KEYCTL_KDF_MAX_OUTPUT_LEN).
const MaxKDFOutput = 1024

// NegativeTimeout is how long a key whose construction failed stays
// negative (the kernel's key_negative_timeout).
const NegativeTimeout = 60 * time.Second

// Limits the kernel puts on what a program passes in. Longer strings fail
// with [EINVAL], larger payloads with EINVAL or E2BIG as each call says.
const (
	MaxTypeName      = 31        // a key type's name
	MaxDescription   = 4095      // a key's description (KEY_MAX_DESC_SIZE)
	MaxPayload       = 1<<20 - 1 // add_key, instantiate
	MaxUpdatePayload = 4096      // KEYCTL_UPDATE
	MaxUserPayload   = 32767     // user and logon keys
	MaxBigKeyPayload = 1 << 20
	MaxCalloutInfo   = 4095 // request_key's callout information
	MaxPkeyInfo      = 4095 // the parameter string of the pkey operations (a page with its NUL)
)

// Operations a public key supports, as KEYCTL_PKEY_QUERY reports them
// (KEYCTL_SUPPORTS_*).
const (
	PkeySupportsEncrypt = 0x01
	PkeySupportsDecrypt = 0x02
	PkeySupportsSign    = 0x04
	PkeySupportsVerify  = 0x08
)
