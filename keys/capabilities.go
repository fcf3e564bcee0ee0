package keys

// Capability bits of KEYCTL_CAPABILITIES.
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

// Capabilities reports what the service supports (KEYCTL_CAPABILITIES).
func (c *Caller) Capabilities() []byte {
	return []byte{
		CapCapabilities | CapPersistent | CapDH | CapBigKey | CapInvalidate | CapRestrict | CapMove,
		Cap2Notifications,
	}
}
