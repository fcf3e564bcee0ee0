package main

import "syscall"

func (a *app) cmdDHCompute(args []string) {
	if len(args) != 4 {
		a.format()
	}
	priv := a.getKeyID(args[1])
	prime := a.getKeyID(args[2])
	base := a.getKeyID(args[3])
	out, err := a.c().DHCompute(priv, prime, base)
	if err != nil {
		a.fail("keyctl_dh_compute_alloc", err)
	}
	a.dhDump(out)
}

// dhLength parses dh_compute_kdf's output length as keyctl does
// (strtoul base 10, junk ignored, ULONG_MAX refused).
func (a *app) dhLength(s string) uint64 {
	v, _, overflow := strtoul(s, 10)
	if v == ^uint64(0) {
		if overflow {
			a.fail("dh_compute: cannot convert generated length value", syscall.ERANGE)
		}
		a.eprintf("dh_compute: cannot convert generated length value: Success\n")
		a.exit(1)
	}
	return v
}

func (a *app) cmdDHComputeKDF(args []string) {
	if len(args) != 6 {
		a.format()
	}
	priv := a.getKeyID(args[1])
	prime := a.getKeyID(args[2])
	base := a.getKeyID(args[3])
	n := a.dhLength(args[4])
	out, err := a.c().DHComputeKDF(priv, prime, base, args[5], nil, n)
	if err != nil {
		a.fail("keyctl_dh_compute_kdf", err)
	}
	a.dhDump(out)
}

func (a *app) cmdDHComputeKDFOI(args []string) {
	args, asHex := shiftX(args)
	if len(args) != 6 {
		a.format()
	}
	priv := a.getKeyID(args[1])
	prime := a.getKeyID(args[2])
	base := a.getKeyID(args[3])
	n := a.dhLength(args[4])
	oi := a.hex2bin(a.grabStdin(), asHex)
	out, err := a.c().DHComputeKDF(priv, prime, base, args[5], oi, n)
	clear(oi)
	if err != nil {
		a.fail("keyctl_dh_compute_kdf", err)
	}
	a.dhDump(out)
}

// dhDump prints a result as keyctl's dh_compute commands do: a count
// line, then two hex digits a byte, a space after every 4 bytes and a
// line break after every 32, none after the last byte. keyctl's loop
// prints one byte even of an empty result (whatever its zero-length
// buffer holds); ukeyctl prints 00 there. The result is zeroed once
// printed, as keyctl zeroes its buffer.
func (a *app) dhDump(b []byte) {
	a.printf("%d bytes of data in result:\n", len(b))
	if len(b) == 0 {
		a.printf("00\n")
		return
	}
	const digits = "0123456789abcdef"
	line := make([]byte, 0, 72)
	for i, c := range b {
		if i > 0 {
			switch {
			case i%32 == 0:
				line = append(line, '\n')
				a.write(line)
				clear(line)
				line = line[:0]
			case i%4 == 0:
				line = append(line, ' ')
			}
		}
		line = append(line, digits[c>>4], digits[c&15])
		b[i] = 0
	}
	line = append(line, '\n')
	a.write(line)
	clear(line)
}
