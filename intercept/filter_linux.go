package intercept

import (
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/wire"
)

// abi is how one system call ABI numbers the key calls: the audit arch
// seccomp reports, and add_key, request_key and keyctl; and, for the
// native ABI, the calls that make and set up a notification pipe
// (pipe2, ioctl), which the daemon serves too.
type abi struct {
	arch                     uint32
	addKey, requestKey, keyc uint32
	pipe2, ioctl             uint32
}

// native is the ABI this program (and the programs it runs) calls with;
// compat are other ABIs the same kernel accepts, whose key calls the
// filter refuses with ENOSYS rather than let them reach the kernel's own
// keyrings unseen.
var native, compat = func() (abi, []abi) {
	switch runtime.GOARCH {
	case "amd64":
		return abi{unix.AUDIT_ARCH_X86_64, 248, 249, 250, 293, 16},
			[]abi{
				{arch: unix.AUDIT_ARCH_I386, addKey: 286, requestKey: 287, keyc: 288},
				// x32: the x86-64 arch with bit 30 set in the number.
				{arch: unix.AUDIT_ARCH_X86_64, addKey: 0x40000000 | 248, requestKey: 0x40000000 | 249, keyc: 0x40000000 | 250},
			}
	case "arm64":
		return abi{unix.AUDIT_ARCH_AARCH64, 217, 218, 219, 59, 29},
			[]abi{{arch: unix.AUDIT_ARCH_ARM, addKey: 309, requestKey: 310, keyc: 311}}
	}
	return abi{}, nil
}()

// userTop is where user space ends for the native ABI (TASK_SIZE_MAX),
// as access_ok bounds what the kernel copies: 4-level page tables' on
// x86-64, 48-bit addresses' on arm64, the usual configurations. A kernel
// with wider addresses accepts more, but only a program that asks to map
// above them could tell.
var userTop = func() uint64 {
	if runtime.GOARCH == "arm64" {
		return 1 << 48
	}
	return 1<<47 - 4096
}()

// The notification pipe's calls: pipe2's flag that asks for one
// (O_NOTIFICATION_PIPE, which is O_EXCL), and the watch queue's ioctls.
const (
	oNotificationPipe   = unix.O_EXCL
	iocWatchQueueSize   = 0x5760 // _IO('W', 0x60)
	iocWatchQueueFilter = 0x5761 // _IO('W', 0x61)
)

// syscallOf tells which key call nr is in the native ABI.
func syscallOf(arch uint32, nr int32) (wire.Syscall, bool) {
	if arch != native.arch {
		return wire.NoSyscall, false
	}
	switch uint32(nr) {
	case native.addKey:
		return wire.SysAddKey, true
	case native.requestKey:
		return wire.SysRequestKey, true
	case native.keyc:
		return wire.SysKeyctl, true
	}
	return wire.NoSyscall, false
}

// Filter returns the seccomp program: the three key calls of the native
// ABI go to the listener (SECCOMP_RET_USER_NOTIF), and so do a pipe2
// that asks for a notification pipe and the two ioctls that size and
// filter one, so that the daemon makes the pipe its key notifications
// go to; the key calls of a compat ABI fail with ENOSYS; everything else
// is allowed. It is nil where ukeys knows no ABI.
func Filter() []unix.SockFilter {
	if native.arch == 0 {
		return nil
	}
	const (
		ldW  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		and  = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
		nrAt = 0  // offsetof(struct seccomp_data, nr)
		arAt = 4  // offsetof(struct seccomp_data, arch)
		a1At = 24 // args[1]'s low word (both ABIs are little-endian)
	)
	// The program is built with symbolic targets, resolved at the end.
	type ins struct {
		code   uint16
		k      uint32
		jt, jf string // labels; "" is the next instruction
		label  string
	}
	var p []ins
	emit := func(i ins) { p = append(p, i) }
	check := func(a abi, to string) {
		for _, nr := range []uint32{a.addKey, a.requestKey, a.keyc} {
			emit(ins{code: jeq, k: nr, jt: to})
		}
	}
	// Native: the arch, then the numbers.
	emit(ins{code: ldW, k: arAt})
	emit(ins{code: jeq, k: native.arch, jf: "compat0"})
	emit(ins{code: ldW, k: nrAt})
	check(native, "notify")
	emit(ins{code: jeq, k: native.pipe2, jt: "pipe2"})
	emit(ins{code: jeq, k: native.ioctl, jt: "ioctl"})
	for _, c := range compat {
		if c.arch == native.arch {
			check(c, "enosys")
		}
	}
	emit(ins{code: ret, k: unix.SECCOMP_RET_ALLOW})
	// pipe2(fds, flags): a notification pipe is the daemon's to make.
	emit(ins{code: ldW, k: a1At, label: "pipe2"})
	emit(ins{code: and, k: oNotificationPipe})
	emit(ins{code: jeq, k: oNotificationPipe, jt: "notify"})
	emit(ins{code: ret, k: unix.SECCOMP_RET_ALLOW})
	// ioctl(fd, cmd, arg): the watch queue's commands (an unsigned int).
	emit(ins{code: ldW, k: a1At, label: "ioctl"})
	emit(ins{code: jeq, k: iocWatchQueueSize, jt: "notify"})
	emit(ins{code: jeq, k: iocWatchQueueFilter, jt: "notify"})
	emit(ins{code: ret, k: unix.SECCOMP_RET_ALLOW})
	// Compat ABIs of another arch.
	n := 0
	for _, c := range compat {
		if c.arch == native.arch {
			continue
		}
		next := "compat" + string(rune('1'+n))
		emit(ins{code: ldW, k: arAt, label: "compat" + string(rune('0'+n))})
		emit(ins{code: jeq, k: c.arch, jf: next})
		emit(ins{code: ldW, k: nrAt})
		check(c, "enosys")
		emit(ins{code: ret, k: unix.SECCOMP_RET_ALLOW})
		n++
	}
	emit(ins{code: ret, k: unix.SECCOMP_RET_ALLOW, label: "compat" + string(rune('0'+n))})
	emit(ins{code: ret, k: unix.SECCOMP_RET_USER_NOTIF, label: "notify"})
	emit(ins{code: ret, k: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS), label: "enosys"})

	at := map[string]int{}
	for i, x := range p {
		if x.label != "" {
			at[x.label] = i
		}
	}
	off := func(i int, label string) uint8 {
		if label == "" {
			return 0
		}
		d := at[label] - i - 1
		if d < 0 || d > 255 {
			panic("intercept: filter jump out of range")
		}
		return uint8(d)
	}
	out := make([]unix.SockFilter, len(p))
	for i, x := range p {
		out[i] = unix.SockFilter{Code: x.code, K: x.k, Jt: off(i, x.jt), Jf: off(i, x.jf)}
	}
	return out
}
