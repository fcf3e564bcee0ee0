package client

import (
	"errors"
	"strconv"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// AddKey creates or updates a key in keyring ring (add_key(2)).
//
// A payload larger than any user or logon key's is first described to
// the daemon by its length (OpAddKeyCheck), and sent only if the daemon
// would look at it: one that the type refuses by its length alone, or
// that a bad keyring or type would refuse anyway, never crosses the
// socket. A daemon that does not know the question is sent the payload.
func (c *Client) AddKey(typ, desc string, payload []byte, ring keyctl.Serial) (keyctl.Serial, error) {
	if payload == nil {
		payload = []byte{}
	}
	if len(payload) > checkAbove {
		err := nothing(c.call(wire.OpAddKeyCheck, wire.Str(typ), wire.Str(desc), wire.Int(len(payload)), wire.Int(ring)))
		var refused *Error
		if errors.As(err, &refused) && refused.Errno != keyctl.EOPNOTSUPP {
			return 0, &Error{Op: wire.OpAddKey.String(), Errno: refused.Errno}
		}
		if err != nil && refused == nil {
			return 0, err // the connection failed
		}
	}
	return serial(c.call(wire.OpAddKey, wire.Str(typ), wire.Str(desc), wire.Bytes(payload), wire.Int(ring)))
}

// checkAbove is the payload size above which AddKey asks first: the
// largest payload a user or logon key takes, so that asking costs those
// nothing, and a round trip is small beside the bytes it may spare.
const checkAbove = keyctl.MaxUserPayload

// RequestKey finds a key, constructing it through the request-key helper
// if callout is not nil (request_key(2)).
func (c *Client) RequestKey(typ, desc string, callout []byte, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.call(wire.OpRequestKey, wire.Str(typ), wire.Str(desc), wire.Bytes(callout), wire.Int(dest)))
}

// GetKeyringID resolves an id, creating a special keyring if create.
func (c *Client) GetKeyringID(id keyctl.Serial, create bool) (keyctl.Serial, error) {
	return serial(c.call(wire.OpGetKeyringID, wire.Int(id), wire.Bool(create)))
}

// JoinSessionKeyring joins or creates a session keyring (nil: anonymous).
func (c *Client) JoinSessionKeyring(name *string) (keyctl.Serial, error) {
	return serial(c.call(wire.OpJoinSession, wire.OptStr(name)))
}

// Update replaces a key's payload.
func (c *Client) Update(id keyctl.Serial, payload []byte) error {
	if payload == nil {
		payload = []byte{}
	}
	return nothing(c.call(wire.OpUpdate, wire.Int(id), wire.Bytes(payload)))
}

// Revoke revokes a key.
func (c *Client) Revoke(id keyctl.Serial) error { return nothing(c.call(wire.OpRevoke, wire.Int(id))) }

// Invalidate invalidates a key.
func (c *Client) Invalidate(id keyctl.Serial) error {
	return nothing(c.call(wire.OpInvalidate, wire.Int(id)))
}

// Chown changes owner and/or group; -1 leaves one as it is.
func (c *Client) Chown(id keyctl.Serial, uid, gid int64) error {
	return nothing(c.call(wire.OpChown, wire.Int(id), wire.Int(uid), wire.Int(gid)))
}

// SetPerm sets the permission mask.
func (c *Client) SetPerm(id keyctl.Serial, perm keyctl.Perm) error {
	return nothing(c.call(wire.OpSetPerm, wire.Int(id), wire.Int(perm)))
}

// Describe returns "type;uid;gid;perm;description".
func (c *Client) Describe(id keyctl.Serial) (string, error) {
	b, err := bytesOf(c.call(wire.OpDescribe, wire.Int(id)))
	return string(b), err
}

// Clear empties a keyring.
func (c *Client) Clear(ring keyctl.Serial) error {
	return nothing(c.call(wire.OpClear, wire.Int(ring)))
}

// Link links a key into a keyring.
func (c *Client) Link(id, ring keyctl.Serial) error {
	return nothing(c.call(wire.OpLink, wire.Int(id), wire.Int(ring)))
}

// Unlink removes a key's link from a keyring.
func (c *Client) Unlink(id, ring keyctl.Serial) error {
	return nothing(c.call(wire.OpUnlink, wire.Int(id), wire.Int(ring)))
}

// Move moves a key between keyrings (flags: [keyctl.MoveExcl]).
func (c *Client) Move(id, from, to keyctl.Serial, flags uint32) error {
	return nothing(c.call(wire.OpMove, wire.Int(id), wire.Int(from), wire.Int(to), wire.Int(flags)))
}

// Search searches a keyring tree, linking the result into dest if not 0.
func (c *Client) Search(ring keyctl.Serial, typ, desc string, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.call(wire.OpSearch, wire.Int(ring), wire.Str(typ), wire.Str(desc), wire.Int(dest)))
}

// Read returns a key's payload (a keyring's: its serials, 4 bytes each).
func (c *Client) Read(id keyctl.Serial) ([]byte, error) {
	return bytesOf(c.call(wire.OpRead, wire.Int(id)))
}

// SetTimeout sets a key's expiry in seconds from now (0: never).
func (c *Client) SetTimeout(id keyctl.Serial, secs uint32) error {
	return nothing(c.call(wire.OpSetTimeout, wire.Int(id), wire.Int(secs)))
}

// Instantiate instantiates a key under construction (helpers only).
func (c *Client) Instantiate(id keyctl.Serial, payload []byte, ring keyctl.Serial) error {
	if payload == nil {
		payload = []byte{}
	}
	return nothing(c.call(wire.OpInstantiate, wire.Int(id), wire.Bytes(payload), wire.Int(ring)))
}

// Negate negates a key under construction for timeout seconds.
func (c *Client) Negate(id keyctl.Serial, timeout uint32, ring keyctl.Serial) error {
	return nothing(c.call(wire.OpNegate, wire.Int(id), wire.Int(timeout), wire.Int(ring)))
}

// Reject rejects a key under construction with errno for timeout seconds.
func (c *Client) Reject(id keyctl.Serial, timeout uint32, errno keyctl.Errno, ring keyctl.Serial) error {
	return nothing(c.call(wire.OpReject, wire.Int(id), wire.Int(timeout), wire.Int(errno), wire.Int(ring)))
}

// AssumeAuthority assumes the authority to construct key id (0: drop it).
func (c *Client) AssumeAuthority(id keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.call(wire.OpAssumeAuthority, wire.Int(id)))
}

// SetReqKeyKeyring sets the default request-key destination and returns
// the previous one.
func (c *Client) SetReqKeyKeyring(n int) (int, error) {
	s, err := serial(c.call(wire.OpSetReqKeyKeyring, wire.Int(n)))
	return int(s), err
}

// GetSecurity returns the key's security label (always empty in ukeys).
func (c *Client) GetSecurity(id keyctl.Serial) (string, error) {
	b, err := bytesOf(c.call(wire.OpGetSecurity, wire.Int(id)))
	return string(b), err
}

// GetPersistent links uid's persistent keyring into dest (-1: own uid).
func (c *Client) GetPersistent(uid int64, dest keyctl.Serial) (keyctl.Serial, error) {
	return serial(c.call(wire.OpGetPersistent, wire.Int(uid), wire.Int(dest)))
}

// RestrictKeyring restricts a keyring (nil, nil: reject all links).
func (c *Client) RestrictKeyring(id keyctl.Serial, typ, restriction *string) error {
	return nothing(c.call(wire.OpRestrictKeyring, wire.Int(id), wire.OptStr(typ), wire.OptStr(restriction)))
}

// SessionToParent gives the caller's session keyring to its parent.
func (c *Client) SessionToParent() error { return nothing(c.call(wire.OpSessionToParent)) }

// Capabilities returns the KEYCTL_CAPABILITIES bytes.
func (c *Client) Capabilities() ([]byte, error) { return bytesOf(c.call(wire.OpCapabilities)) }

// WatchKey adds (watchID 0..255) or removes (-1) a watch on a key; events
// arrive through [Client.NextNotification].
func (c *Client) WatchKey(id keyctl.Serial, watchID int) error {
	return nothing(c.call(wire.OpWatchKey, wire.Int(id), wire.Int(watchID)))
}

// NextNotification waits for the next event on the connection's watches.
func (c *Client) NextNotification() (keyctl.Notification, error) {
	r, err := c.call(wire.OpWatchNext)
	for errors.Is(err, keyctl.EAGAIN) { // the daemon bounds each wait
		r, err = c.call(wire.OpWatchNext)
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
	b, err := bytesOf(c.call(wire.OpProcKeys))
	return string(b), err
}

// ProcKeyUsers returns the daemon's /proc/key-users view.
func (c *Client) ProcKeyUsers() (string, error) {
	b, err := bytesOf(c.call(wire.OpProcKeyUsers))
	return string(b), err
}

// Sysctl returns the tunables as "name = value" lines.
func (c *Client) Sysctl() (string, error) {
	b, err := bytesOf(c.call(wire.OpSysctlGet))
	return string(b), err
}

// SetSysctl sets a tunable (root only).
func (c *Client) SetSysctl(name, value string) error {
	return nothing(c.call(wire.OpSysctlSet, wire.Str(name), wire.Str(value)))
}

// Status returns the daemon's status lines.
func (c *Client) Status() (string, error) {
	b, err := bytesOf(c.call(wire.OpStatus))
	return string(b), err
}

// NamespaceStatus is what the daemon says of one of its seccomp agent's
// key namespaces (a pod's or a container's): its containers, what it
// holds and the calls it has served.
type NamespaceStatus = wire.NamespaceStatus

// Namespaces returns the key namespaces of the daemon's seccomp agent,
// read from its status ([Client.Status]); listed is false where the
// status lists none: a daemon without the agent, an older daemon, or a
// caller less privileged than the daemon (root with the daemon's
// capabilities), who is not told other containers' ids.
func (c *Client) Namespaces() (nss []NamespaceStatus, listed bool, err error) {
	text, err := c.Status()
	if err != nil {
		return nil, false, err
	}
	return wire.ParseNamespaces(text)
}

// SessionToken returns the current session keyring's serial and a token
// that lets another process possess it, formatted for [SessionEnv].
func (c *Client) SessionToken() (string, error) {
	r, err := c.call(wire.OpSessionToken)
	if err != nil {
		return "", err
	}
	if len(r.Ints) < 1 || len(r.Bufs) < 1 {
		return "", ErrProtocol
	}
	return strconv.FormatInt(r.Ints[0], 10) + ":" + string(r.Bufs[0]), nil
}

func (c *Client) attach(token string) (keyctl.Serial, error) {
	return serial(c.call(wire.OpSessionAttach, wire.Str(token)))
}

// Intercept hands the daemon a seccomp listener (intercept.Install):
// from then on the daemon serves the add_key, keyctl and request_key
// calls of every process under that filter as their own calls to it
// (ukeyctl run). The descriptor stays the caller's to close.
func (c *Client) Intercept(listener int) error {
	if c.local != nil || c.pl != nil {
		return &Error{Op: wire.OpIntercept.String(), Errno: keyctl.EOPNOTSUPP}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.forget()
	// The descriptor goes with the request's own write: a deferred
	// handshake is finished first.
	if p := c.pending; p != nil {
		if err := c.finishHandshake(p, false); err != nil {
			return err
		}
	}
	if err := c.req.Set(wire.OpIntercept); err != nil {
		return err
	}
	c.tag++
	c.req.Tag = c.tag
	if err := c.sc.Out.Request(&c.req); err != nil {
		return err
	}
	if err := c.sc.FlushFD(listener); err != nil {
		return err
	}
	body, err := c.sc.In.Next()
	defer c.sc.In.Done()
	if err == nil {
		err = c.resp.Decode(body)
	}
	if err == nil && c.resp.Tag != c.req.Tag {
		err = ErrProtocol
	}
	if err != nil {
		return err
	}
	_, err = answer(wire.OpIntercept, &c.resp)
	return err
}
