package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iovAttacker is the name under which the test binary makes hostile
// KEYCTL_INSTANTIATE_IOV calls (iovAttack) under ukeyctl run.
const iovAttacker = "ukeys-iov-attack"

func init() { testPrograms[iovAttacker] = iovAttack }

// iovAttack makes KEYCTL_INSTANTIATE_IOV calls whose segment lengths
// are chosen to hurt the one who adds them up: lengths that wrap around
// to a small total, in two steps and in many (512 times 2^55 is 2^64),
// a length past user space, and a total over the bound. It prints each call's errno, one line each.
func iovAttack() int {
	p := make([]byte, 16)
	for _, c := range []struct {
		name string
		lens []uint64
	}{
		{"wrap in two", []uint64{1 << 63, 1<<63 + 3}},
		{"wrap in many", slices.Repeat([]uint64{1 << 55}, 512)},
		{"past user space", []uint64{3, 1 << 47}},
		{"a gigabyte", []uint64{1 << 30}},
	} {
		vec := make([]unix.Iovec, len(c.lens))
		for i, n := range c.lens {
			vec[i].Base, vec[i].Len = &p[0], n
		}
		_, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_INSTANTIATE_IOV, 42, uintptr(unsafe.Pointer(&vec[0])), uintptr(len(vec)), uintptr(0xfffffffd), 0)
		fmt.Printf("%s: %v\n", c.name, e)
	}
	return 0
}

// A program under ukeyctl run that hands the daemon KEYCTL_INSTANTIATE_IOV
// segments whose lengths wrap around when added once made the daemon's
// listener allocate from a negative length and panic, which took the
// whole daemon, and every other caller's keys, with it. Each such call
// now fails as the kernel fails it, and the daemon goes on serving.
func TestInstantiateIOVLengthsCannotCrashTheDaemon(t *testing.T) {
	d := startDaemon(t)
	bin := binDir(t, "ukeyctl", iovAttacker)
	ukeyctl := filepath.Join(bin, "ukeyctl")
	if out, err := boundedCommand(t, ukeyctl, "run", "--", "true").CombinedOutput(); err != nil {
		t.Skipf("no ukeyctl run here (the kernel's seccomp user notification): %v %s", err, out)
	}
	out, err := boundedCommand(t, ukeyctl, "run", "--", filepath.Join(bin, iovAttacker)).CombinedOutput()
	if err != nil {
		t.Fatalf("the attack under ukeyctl run: %v\n%s", err, out)
	}
	want := strings.Join([]string{
		"wrap in two: invalid argument", // a length negative as a ssize_t
		"wrap in many: bad address",
		"past user space: bad address",
		"a gigabyte: invalid argument",
	}, "\n") + "\n"
	if string(out) != want {
		t.Errorf("the attack's calls answered:\n%s\nwant:\n%s", out, want)
	}
	// The daemon is still there, and serves.
	select {
	case err := <-d.done:
		t.Fatalf("the daemon ended: %v", err)
	default:
	}
	if r := run("ukeyctl", "", "add", "user", "after-the-attack", "v", "@u"); r.Code != 0 {
		t.Fatalf("the daemon after the attack: %+v", r)
	}
}
