package keyctl

// Serial identifies a key. Positive serials name keys; the negative values
// below name the caller's special keyrings, as in the kernel's API.
type Serial int32

// Special key ids (KEY_SPEC_*).
const (
	ThreadKeyring      Serial = -1
	ProcessKeyring     Serial = -2
	SessionKeyring     Serial = -3
	UserKeyring        Serial = -4
	UserSessionKeyring Serial = -5
	GroupKeyring       Serial = -6
	ReqKeyAuthKey      Serial = -7
	RequestorKeyring   Serial = -8
)
