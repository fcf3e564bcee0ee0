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
func (c *Caller) Capabilities() []byte {
	return []byte{
		CapCapabilities | CapPersistent | CapDH | CapPublicKey | CapBigKey | CapInvalidate | CapRestrict | CapMove,
		Cap2Notifications,
	}
}
