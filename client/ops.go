package client

import (
	"errors"
	"strconv"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// AddKey creates or updates a key in keyring ring (add_key(2)).
func (c *Client) AddKey(typ, desc string, payload []byte, ring keyctl.Serial) (keyctl.Serial, error) {
	if payload == nil {
		payload = []byte{}
	}
	return serial(c.do(wire.OpAddKey, i64(ring), []byte(typ), []byte(desc), payload))
}

// RequestKey finds a key, constructing it through the request-key helper
// if callout is not nil (request_key(2)).
func (c *Client) RequestKey(typ, desc string, callout []byte, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.do(wire.OpRequestKey, i64(dest), []byte(typ), []byte(desc), callout))
}

// GetKeyringID resolves an id, creating a special keyring if create.
func (c *Client) GetKeyringID(id keyctl.Serial, create bool) (keyctl.Serial, error) {
	return serial(c.do(wire.OpGetKeyringID, i64(id, create)))
}

// JoinSessionKeyring joins or creates a session keyring (nil: anonymous).
func (c *Client) JoinSessionKeyring(name *string) (keyctl.Serial, error) {
	return serial(c.do(wire.OpJoinSession, nil, strPtr(name)))
}

// Update replaces a key's payload.
func (c *Client) Update(id keyctl.Serial, payload []byte) error {
	if payload == nil {
		payload = []byte{}
	}
	return nothing(c.do(wire.OpUpdate, i64(id), payload))
}

// Revoke revokes a key.
func (c *Client) Revoke(id keyctl.Serial) error { return nothing(c.do(wire.OpRevoke, i64(id))) }

// Invalidate invalidates a key.
func (c *Client) Invalidate(id keyctl.Serial) error { return nothing(c.do(wire.OpInvalidate, i64(id))) }

// Chown changes owner and/or group; -1 leaves one as it is.
func (c *Client) Chown(id keyctl.Serial, uid, gid int64) error {
	return nothing(c.do(wire.OpChown, i64(id, uid, gid)))
}

// SetPerm sets the permission mask.
func (c *Client) SetPerm(id keyctl.Serial, perm keyctl.Perm) error {
	return nothing(c.do(wire.OpSetPerm, i64(id, perm)))
}

// Describe returns "type;uid;gid;perm;description".
func (c *Client) Describe(id keyctl.Serial) (string, error) {
	b, err := bytesOf(c.do(wire.OpDescribe, i64(id)))
	return string(b), err
}

// Clear empties a keyring.
func (c *Client) Clear(ring keyctl.Serial) error { return nothing(c.do(wire.OpClear, i64(ring))) }

// Link links a key into a keyring.
func (c *Client) Link(id, ring keyctl.Serial) error { return nothing(c.do(wire.OpLink, i64(id, ring))) }

// Unlink removes a key's link from a keyring.
func (c *Client) Unlink(id, ring keyctl.Serial) error {
	return nothing(c.do(wire.OpUnlink, i64(id, ring)))
}

// Move moves a key between keyrings (flags: keyctl.MoveExcl).
func (c *Client) Move(id, from, to keyctl.Serial, flags uint32) error {
	return nothing(c.do(wire.OpMove, i64(id, from, to, flags)))
}

// Search searches a keyring tree, linking the result into dest if not 0.
func (c *Client) Search(ring keyctl.Serial, typ, desc string, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.do(wire.OpSearch, i64(ring, dest), []byte(typ), []byte(desc)))
}

// Read returns a key's payload (a keyring's: its serials, 4 bytes each).
func (c *Client) Read(id keyctl.Serial) ([]byte, error) { return bytesOf(c.do(wire.OpRead, i64(id))) }

// SetTimeout sets a key's expiry in seconds from now (0: never).
func (c *Client) SetTimeout(id keyctl.Serial, secs uint32) error {
	return nothing(c.do(wire.OpSetTimeout, i64(id, secs)))
}

// Instantiate instantiates a key under construction (helpers only).
func (c *Client) Instantiate(id keyctl.Serial, payload []byte, ring keyctl.Serial) error {
	if payload == nil {
		payload = []byte{}
	}
	return nothing(c.do(wire.OpInstantiate, i64(id, ring), payload))
}

// Negate negates a key under construction for timeout seconds.
func (c *Client) Negate(id keyctl.Serial, timeout uint32, ring keyctl.Serial) error {
	return nothing(c.do(wire.OpNegate, i64(id, timeout, ring)))
}

// Reject rejects a key under construction with errno for timeout seconds.
func (c *Client) Reject(id keyctl.Serial, timeout uint32, errno keyctl.Errno, ring keyctl.Serial) error {
	return nothing(c.do(wire.OpReject, i64(id, timeout, errno, ring)))
}

// AssumeAuthority assumes the authority to construct key id (0: drop it).
func (c *Client) AssumeAuthority(id keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.do(wire.OpAssumeAuthority, i64(id)))
}

// SetReqKeyKeyring sets the default request-key destination and returns
// the previous one.
func (c *Client) SetReqKeyKeyring(n int) (int, error) {
	s, err := serial(c.do(wire.OpSetReqKeyKeyring, i64(n)))
	return int(s), err
}

// GetSecurity returns the key's security label (always empty in ukeys).
func (c *Client) GetSecurity(id keyctl.Serial) (string, error) {
	b, err := bytesOf(c.do(wire.OpGetSecurity, i64(id)))
	return string(b), err
}

// GetPersistent links uid's persistent keyring into dest (-1: own uid).
func (c *Client) GetPersistent(uid int64, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.do(wire.OpGetPersistent, i64(uid, dest)))
}

// RestrictKeyring restricts a keyring (nil, nil: reject all links).
func (c *Client) RestrictKeyring(id keyctl.Serial, typ, restriction *string) error {
	return nothing(c.do(wire.OpRestrictKeyring, i64(id), strPtr(typ), strPtr(restriction)))
}

// SessionToParent gives the caller's session keyring to its parent.
func (c *Client) SessionToParent() error { return nothing(c.do(wire.OpSessionToParent, nil)) }

// Capabilities returns the KEYCTL_CAPABILITIES bytes.
func (c *Client) Capabilities() ([]byte, error) { return bytesOf(c.do(wire.OpCapabilities, nil)) }

// WatchKey adds (watchID 0..255) or removes (-1) a watch on a key; events
// arrive through NextNotification.
func (c *Client) WatchKey(id keyctl.Serial, watchID int) error {
	return nothing(c.do(wire.OpWatchKey, i64(id, watchID)))
}

// NextNotification waits for the next event on the connection's watches.
func (c *Client) NextNotification() (keyctl.Notification, error) {
	r, err := c.do(wire.OpWatchNext, nil)
	for errors.Is(err, keyctl.EAGAIN) { // the daemon bounds each wait
		r, err = c.do(wire.OpWatchNext, nil)
	}
	if err != nil {
		return keyctl.Notification{}, err
	}
	if len(r.Ints) < 4 {
		return keyctl.Notification{}, ErrProtocol
	}
	return keyctl.Notification{Key: keyctl.Serial(r.Ints[0]), Kind: keyctl.NotifyKind(r.Ints[1]),
		Aux: int32(r.Ints[2]), WatchID: uint8(r.Ints[3])}, nil
}

// ProcKeys returns the daemon's /proc/keys view for this caller.
func (c *Client) ProcKeys() (string, error) {
	b, err := bytesOf(c.do(wire.OpProcKeys, nil))
	return string(b), err
}

// ProcKeyUsers returns the daemon's /proc/key-users view.
func (c *Client) ProcKeyUsers() (string, error) {
	b, err := bytesOf(c.do(wire.OpProcKeyUsers, nil))
	return string(b), err
}

// Sysctl returns the tunables as "name = value" lines.
func (c *Client) Sysctl() (string, error) {
	b, err := bytesOf(c.do(wire.OpSysctlGet, nil))
	return string(b), err
}

// SetSysctl sets a tunable (root only).
func (c *Client) SetSysctl(name, value string) error {
	return nothing(c.do(wire.OpSysctlSet, nil, []byte(name), []byte(value)))
}

// Status returns the daemon's status lines.
func (c *Client) Status() (string, error) {
	b, err := bytesOf(c.do(wire.OpStatus, nil))
	return string(b), err
}

// SessionToken returns the current session keyring's serial and a token
// that lets another process possess it, formatted for SessionEnv.
func (c *Client) SessionToken() (string, error) {
	r, err := c.do(wire.OpSessionToken, nil)
	if err != nil {
		return "", err
	}
	if len(r.Ints) < 1 || len(r.Bufs) < 1 {
		return "", ErrProtocol
	}
	return strconv.FormatInt(r.Ints[0], 10) + ":" + string(r.Bufs[0]), nil
}

func (c *Client) attach(token string) (keyctl.Serial, error) {
	return serial(c.do(wire.OpSessionAttach, nil, []byte(token)))
}
