package client

import (
	"encoding/binary"

	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/wire"
)

// PkeyQuery is what a public key can do with a parameter string, as
// KEYCTL_PKEY_QUERY reports it.
type PkeyQuery struct {
	SupportedOps uint32 // keyctl.PkeySupports* bits
	KeySize      uint32 // bits
	MaxDataSize  uint16
	MaxSigSize   uint16
	MaxEncSize   uint16
	MaxDecSize   uint16
}

// PkeyQuery asks what the asymmetric key id can do with the parameters
// in info ("enc=pkcs1 hash=sha256"; keyctl_pkey_query).
func (c *Client) PkeyQuery(id keyctl.Serial, info string) (PkeyQuery, error) {
	b, err := bytesOf(c.call(wire.OpPkeyQuery, wire.Int(id), wire.Int(0), wire.Str(info)))
	if err != nil {
		return PkeyQuery{}, err
	}
	if len(b) < 16 {
		return PkeyQuery{}, ErrProtocol
	}
	ne := binary.NativeEndian
	return PkeyQuery{
		SupportedOps: ne.Uint32(b[0:]), KeySize: ne.Uint32(b[4:]),
		MaxDataSize: ne.Uint16(b[8:]), MaxSigSize: ne.Uint16(b[10:]),
		MaxEncSize: ne.Uint16(b[12:]), MaxDecSize: ne.Uint16(b[14:]),
	}, nil
}

// PkeyEncrypt encrypts in with the key id, into at most outLen bytes
// (keyctl_pkey_encrypt).
func (c *Client) PkeyEncrypt(id keyctl.Serial, info string, in []byte, outLen int) ([]byte, error) {
	return c.pkeyEDS(wire.OpPkeyEncrypt, id, info, in, outLen)
}

// PkeyDecrypt decrypts in with the private key id (keyctl_pkey_decrypt).
func (c *Client) PkeyDecrypt(id keyctl.Serial, info string, in []byte, outLen int) ([]byte, error) {
	return c.pkeyEDS(wire.OpPkeyDecrypt, id, info, in, outLen)
}

// PkeySign signs the digest in with the private key id
// (keyctl_pkey_sign).
func (c *Client) PkeySign(id keyctl.Serial, info string, in []byte, outLen int) ([]byte, error) {
	return c.pkeyEDS(wire.OpPkeySign, id, info, in, outLen)
}

// PkeyVerify checks that sig signs the digest data with the key id
// (keyctl_pkey_verify): nil, or EKEYREJECTED for a signature of
// something else.
func (c *Client) PkeyVerify(id keyctl.Serial, info string, data, sig []byte) error {
	return nothing(c.call(wire.OpPkeyVerify, wire.Int(id), wire.Str(info), wire.Bytes(nonNil(data)), wire.Bytes(nonNil(sig))))
}

func (c *Client) pkeyEDS(op wire.Op, id keyctl.Serial, info string, in []byte, outLen int) ([]byte, error) {
	return bytesOf(c.call(op, wire.Int(id), wire.Str(info), wire.Bytes(nonNil(in)), wire.Int(int64(outLen))))
}

// nonNil makes an empty input present: a nil buffer reads as absent.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
