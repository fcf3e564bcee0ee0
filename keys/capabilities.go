package keys

import "github.com/ukeys/ukeys/keyctl"

// Capability bits of KEYCTL_CAPABILITIES (keyctl.Cap*).
const (
	CapCapabilities   = keyctl.CapCapabilities
	CapPersistent     = keyctl.CapPersistent
	CapDH             = keyctl.CapDH
	CapPublicKey      = keyctl.CapPublicKey
	CapBigKey         = keyctl.CapBigKey
	CapInvalidate     = keyctl.CapInvalidate
	CapRestrict       = keyctl.CapRestrict
	CapMove           = keyctl.CapMove
	Cap2NSKeyringName = keyctl.Cap2NSKeyringName
	Cap2NSKeyTag      = keyctl.Cap2NSKeyTag
	Cap2Notifications = keyctl.Cap2Notifications
)

// Capabilities reports what the service supports (KEYCTL_CAPABILITIES).
// As the kernel sets the public-key and big_key bits only when built
// with those types, they follow the types registered in this service:
// a program that trusts `keyctl supports` is never promised a type
// that add_key would refuse.
func (c *Caller) Capabilities() []byte {
	caps := byte(CapCapabilities | CapPersistent | CapDH | CapInvalidate | CapRestrict | CapMove)
	if t := c.s.lookupType("asymmetric"); t != nil && t.Pkey != nil {
		caps |= CapPublicKey
	}
	if c.s.lookupType("big_key") != nil {
		caps |= CapBigKey
	}
	return []byte{caps, Cap2Notifications}
}
