package main

import (
	"github.com/ukeys/ukeys/keyctl"
)

// Commands a request-key helper uses to construct the key it was asked
// for: they need the authority the helper assumed.

func (a *app) cmdInstantiate(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 4 {
		a.format()
	}
	key := a.getKeyID(args[1])
	dest := a.getKeyID(args[3])
	data := a.hex2bin([]byte(args[2]), asHex)
	err := a.c().Instantiate(key, data, dest)
	clear(data)
	if err != nil {
		a.fail("keyctl_instantiate", err)
	}
}

func (a *app) cmdPinstantiate(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 3 {
		a.format()
	}
	key := a.getKeyID(args[1])
	dest := a.getKeyID(args[2])
	data := a.hex2bin(a.grabStdin(), asHex)
	err := a.c().Instantiate(key, data, dest)
	clear(data)
	if err != nil {
		a.fail("keyctl_instantiate", err)
	}
}

func (a *app) cmdNegate(args []string) {
	if len(args) != 4 {
		a.format()
	}
	key := a.getKeyID(args[1])
	timeout := a.timeoutArg(args[2])
	dest := a.getKeyID(args[3])
	if err := a.c().Negate(key, timeout, dest); err != nil {
		a.fail("keyctl_negate", err)
	}
}

func (a *app) cmdReject(args []string) {
	if len(args) != 5 {
		a.format()
	}
	key := a.getKeyID(args[1])
	timeout := a.timeoutArg(args[2])
	var rejerr uint32
	switch args[3] {
	case "rejected":
		rejerr = uint32(keyctl.EKEYREJECTED)
	case "revoked":
		rejerr = uint32(keyctl.EKEYREVOKED)
	case "expired":
		rejerr = uint32(keyctl.EKEYEXPIRED)
	default:
		v, ok := parseUnsigned(args[3], 10)
		if !ok {
			a.eprintf("Unparsable error: '%s'\n", args[3])
			a.exit(2)
		}
		rejerr = uint32(v)
	}
	dest := a.getKeyID(args[4])
	// The wire carries a 16-bit errno; anything from MAX_ERRNO up is
	// refused alike, so clamp there rather than wrap.
	e := keyctl.Errno(min(rejerr, 4095))
	if err := a.c().Reject(key, timeout, e, dest); err != nil {
		a.fail("keyctl_negate", err)
	}
}
