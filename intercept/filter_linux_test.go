package intercept

import (
	"encoding/binary"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// run interprets the classic BPF program prog (the instructions Filter
// uses) on a seccomp_data of arch and nr, and returns its verdict.
func run(t *testing.T, prog []unix.SockFilter, arch uint32, nr int32) uint32 {
	return runArg(t, prog, arch, nr, 0)
}

// runArg is run with the call's second argument arg1.
func runArg(t *testing.T, prog []unix.SockFilter, arch uint32, nr int32, arg1 uint64) uint32 {
	var data [64]byte
	binary.NativeEndian.PutUint32(data[0:], uint32(nr))
	binary.NativeEndian.PutUint32(data[4:], arch)
	binary.NativeEndian.PutUint64(data[24:], arg1)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.NativeEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= in.K
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %d: code %#x", pc, in.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

func TestFilter(t *testing.T) {
	prog := Filter()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		if prog != nil {
			t.Fatal("a filter for an unknown ABI")
		}
		t.Skip("no ABI known for " + runtime.GOARCH)
	}
	notify, allow := uint32(unix.SECCOMP_RET_USER_NOTIF), uint32(unix.SECCOMP_RET_ALLOW)
	enosys := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	cases := []struct {
		arch uint32
		nr   int32
		want uint32
	}{
		{native.arch, int32(native.addKey), notify},
		{native.arch, int32(native.requestKey), notify},
		{native.arch, int32(native.keyc), notify},
		{native.arch, unix.SYS_READ, allow},
		{native.arch, unix.SYS_GETPID, allow},
		{0x12345678, int32(native.keyc), allow}, // an arch the kernel would not run
	}
	for _, c := range compat {
		for _, nr := range []uint32{c.addKey, c.requestKey, c.keyc} {
			cases = append(cases, struct {
				arch uint32
				nr   int32
				want uint32
			}{c.arch, int32(nr), enosys})
		}
		cases = append(cases, struct {
			arch uint32
			nr   int32
			want uint32
		}{c.arch, 3, allow})
	}
	for _, c := range cases {
		if got := run(t, prog, c.arch, c.nr); got != c.want {
			t.Errorf("arch %#x nr %#x: %#x, want %#x", c.arch, c.nr, got, c.want)
		}
	}
}

// A pipe2 that asks for a notification pipe, and the watch queue's two
// ioctls, go to the listener; every other pipe2 and ioctl is the
// kernel's.
func TestFilterNotificationPipes(t *testing.T) {
	prog := Filter()
	if prog == nil {
		t.Skip("no ABI known for " + runtime.GOARCH)
	}
	notify, allow := uint32(unix.SECCOMP_RET_USER_NOTIF), uint32(unix.SECCOMP_RET_ALLOW)
	for _, c := range []struct {
		nr   uint32
		arg1 uint64
		want uint32
	}{
		{native.pipe2, unix.O_EXCL, notify},
		{native.pipe2, unix.O_EXCL | unix.O_NONBLOCK | unix.O_CLOEXEC, notify},
		{native.pipe2, 0, allow},
		{native.pipe2, unix.O_CLOEXEC | unix.O_DIRECT, allow},
		{native.ioctl, 0x5760, notify},
		{native.ioctl, 0x5761, notify},
		{native.ioctl, 1<<32 | 0x5760, notify}, // cmd is an unsigned int
		{native.ioctl, 0x5762, allow},          // keyutils' PIPE_IOC_SYNC: the kernel's ENOTTY
		{native.ioctl, 0x541b, allow},          // FIONREAD
		{native.ioctl, unix.TCGETS, allow},
	} {
		if got := runArg(t, prog, native.arch, int32(c.nr), c.arg1); got != c.want {
			t.Errorf("nr %d arg %#x: %#x, want %#x", c.nr, c.arg1, got, c.want)
		}
	}
}
