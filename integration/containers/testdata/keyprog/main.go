// Command keyprog is what TestRuncContainers runs inside a container: it
// makes the kernel's own key system calls, which the container's seccomp
// profile hands to ukeyd's agent.
//
//	keyprog add DESC [SECONDS]    add a user key DESC to @u, then wait
//	keyprog search DESC           search @u for it
//	keyprog watch                 watch a keyring through a notification
//	                              pipe, link a key into it, read the record
//	keyprog proc DESC [SECONDS]   add a user key DESC to @u, wait, then print
//	                              /proc/keys, /proc/key-users and maxkeys,
//	                              set maxkeys to 321 and print it again
//	keyprog possess DESC          add a user key DESC to @p that only its
//	                              possessor may view, say whether it and a
//	                              child of it (keyprog peek) see it in /proc/keys
//	keyprog loop DESC SECONDS OTHER
//	                              add a user key DESC to @u, then read and
//	                              search it as fast as it can for SECONDS
//	                              (or until SIGTERM),
//	                              and say how many calls it made and how
//	                              many failed; then search @u for OTHER
//	keyprog show                  list @u's keys, as keyctl show @u does
//	keyprog procloop DESC OTHER   add a user key DESC to @u, then read
//	                              /proc/keys and maxkeys in turn as fast as
//	                              it can until /stop is in its root (or
//	                              SIGTERM); at each /switch-N that appears it
//	                              adds DESC-N; a read fails if it errs, lacks
//	                              a key of its own or shows one of OTHER's;
//	                              it says its reads and failures each phase
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func cstr(s string) uintptr {
	b := append([]byte(s), 0)
	return uintptr(unsafe.Pointer(&b[0]))
}

func main() {
	const userKeyring = 0xfffffffc // KEY_SPEC_USER_KEYRING
	var e unix.Errno
	switch os.Args[1] {
	case "add":
		v := []byte("v")
		_, _, e = unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(os.Args[2]), uintptr(unsafe.Pointer(&v[0])), 1, userKeyring, 0)
	case "search":
		_, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, userKeyring, cstr("user"), cstr(os.Args[2]), 0, 0)
	case "watch":
		watch()
		return
	case "proc":
		proc()
		return
	case "possess", "peek":
		possess()
		return
	case "loop":
		loop(os.Args[2], os.Args[3], os.Args[4])
		return
	case "show":
		show()
		return
	case "procloop":
		procloop(os.Args[2], os.Args[3])
		return
	}
	if e != 0 {
		fmt.Println(os.Args[1], e)
	} else {
		fmt.Println(os.Args[1], "ok")
	}
	if len(os.Args) > 3 {
		s, _ := strconv.Atoi(os.Args[3])
		time.Sleep(time.Duration(s) * time.Second)
		// Still there, for this container's own.
		_, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, userKeyring, cstr("user"), cstr(os.Args[2]), 0, 0)
		if e != 0 {
			fmt.Println("search", e)
		} else {
			fmt.Println("search ok")
		}
	}
}

// watch says whether KEYCTL_CAPABILITIES tells of notifications, then
// makes a notification pipe as keyutils' keyctl watch does, watches a
// new keyring through it, links a key into the keyring and prints the
// record that came: "watch link ok" if it is the link of that key.
func watch() {
	const userKeyring = 0xfffffffc
	caps := make([]byte, 2)
	unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_CAPABILITIES, uintptr(unsafe.Pointer(&caps[0])), 2)
	fmt.Println("notify", caps[1]&0x04 != 0) // KEYCTL_CAPS1_NOTIFICATIONS
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_EXCL|unix.O_CLOEXEC); err != nil {
		fmt.Println("pipe2", err)
		return
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fds[0]), 0x5760, 32); e != 0 {
		fmt.Println("set size", e)
		return
	}
	ring, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("keyring"), cstr("watched"), 0, 0, userKeyring, 0)
	if e != 0 {
		fmt.Println("add keyring", e)
		return
	}
	if _, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_WATCH_KEY, ring, uintptr(fds[0]), 1, 0, 0); e != 0 {
		fmt.Println("watch", e)
		return
	}
	v := []byte("v")
	k, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr("k"), uintptr(unsafe.Pointer(&v[0])), 1, ring, 0)
	if e != 0 {
		fmt.Println("add", e)
		return
	}
	pfd := []unix.PollFd{{Fd: int32(fds[0]), Events: unix.POLLIN}}
	if n, _ := unix.Poll(pfd, 5000); n <= 0 {
		fmt.Println("watch: no record")
		return
	}
	rec := make([]byte, 128)
	n, err := unix.Read(fds[0], rec)
	if err != nil || n != 16 {
		fmt.Println("watch: read", n, err)
		return
	}
	le := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	// key_notification: type 1 (key) and subtype 2 (linked), the
	// keyring, and the key linked.
	if le(rec) != 1|2<<24 || uintptr(le(rec[8:])) != ring || uintptr(le(rec[12:])) != k {
		fmt.Printf("watch: record % x\n", rec[:n])
		return
	}
	fmt.Println("watch link ok")
}

// proc adds a user key, waits, and prints what the container sees of
// its keys in /proc: its keys, its key-users, its maxkeys (which it
// then sets, as its root may, and prints again).
func proc() {
	const userKeyring = 0xfffffffc
	v := []byte("v")
	if _, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(os.Args[2]), uintptr(unsafe.Pointer(&v[0])), 1, userKeyring, 0); e != 0 {
		fmt.Println("add", e)
		return
	}
	if len(os.Args) > 3 {
		s, _ := strconv.Atoi(os.Args[3])
		time.Sleep(time.Duration(s) * time.Second)
	}
	const maxkeys = "/proc/sys/kernel/keys/maxkeys"
	for _, p := range []string{"/proc/keys", "/proc/key-users", maxkeys} {
		b, err := os.ReadFile(p)
		fmt.Printf("%s: %v\n%s", p, err, b)
	}
	err := os.WriteFile(maxkeys, []byte("321\n"), 0)
	b, _ := os.ReadFile(maxkeys)
	fmt.Printf("write %s: %v\n%s", maxkeys, err, b)
}

// possess adds a key to its process keyring that only a possessor may
// view (peek only looks), and says whether it sees the key in
// /proc/keys; then runs itself as peek, a child, which has no process
// keyring of its parent's and must not.
func possess() {
	desc := os.Args[2]
	if os.Args[1] == "possess" {
		const processKeyring = 0xfffffffe
		v := []byte("v")
		id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(desc), uintptr(unsafe.Pointer(&v[0])), 1, processKeyring, 0)
		if e == 0 {
			_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_SETPERM, id, 0x3f000000)
		}
		if e != 0 {
			fmt.Println("add", e)
			return
		}
	}
	b, err := os.ReadFile("/proc/keys")
	fmt.Printf("%s sees it: %v %v\n", os.Args[1], strings.Contains(string(b), " "+desc+": "), err)
	if os.Args[1] == "possess" {
		out, err := exec.Command(os.Args[0], "peek", desc).CombinedOutput()
		fmt.Printf("%s%v\n", out, err)
	}
}

// loop adds desc, then reads and searches it in turn until seconds
// have passed or it is sent SIGTERM, counting its calls and their failures; then it searches
// for other, which must be another container's.
func loop(desc, seconds, other string) {
	const userKeyring = 0xfffffffc
	v := []byte("looped")
	id, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(desc), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)), userKeyring, 0)
	if e != 0 {
		fmt.Println("add", e)
		return
	}
	fmt.Println("add ok")
	s, _ := strconv.Atoi(seconds)
	end := time.Now().Add(time.Duration(s) * time.Second)
	d := cstr(desc)
	buf := make([]byte, 64)
	calls, failures := 0, 0
	var first error
	var slowest time.Duration
	// Stopped (crictl stop), it says how it went all the same.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, unix.SIGTERM)
	for time.Now().Before(end) && len(stop) == 0 {
		start := time.Now()
		var r uintptr
		if calls%2 == 0 {
			r, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, id, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
			if e == 0 && (r != uintptr(len(v)) || string(buf[:r]) != string(v)) {
				e = unix.EBADMSG
			}
		} else {
			r, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, userKeyring, cstr("user"), d, 0, 0)
			if e == 0 && r != id {
				e = unix.EBADMSG
			}
		}
		slowest = max(slowest, time.Since(start))
		calls++
		if e != 0 {
			failures++
			if first == nil {
				first = fmt.Errorf("call %d: %w", calls, e)
			}
		}
	}
	fmt.Printf("loop calls %d failures %d slowest %v first %v\n", calls, failures, slowest.Round(time.Millisecond), first)
	_, _, e = unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_SEARCH, userKeyring, cstr("user"), cstr(other), 0, 0)
	if e != 0 {
		fmt.Println("other", e)
	} else {
		fmt.Println("other ok")
	}
}

// show prints the user keyring's id and each key linked in it, with
// its type and description, as keyctl show @u does.
func show() {
	const userKeyring = 0xfffffffc
	ring, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, userKeyring, 0)
	if e != 0 {
		fmt.Println("show", e)
		return
	}
	ids := make([]byte, 4096)
	n, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, userKeyring, uintptr(unsafe.Pointer(&ids[0])), uintptr(len(ids)), 0, 0)
	if e != 0 {
		fmt.Println("show", e)
		return
	}
	fmt.Printf("@u keyring %d\n", ring)
	desc := make([]byte, 256)
	for i := 0; i+4 <= int(min(n, uintptr(len(ids)))); i += 4 {
		id := uintptr(uint32(ids[i]) | uint32(ids[i+1])<<8 | uint32(ids[i+2])<<16 | uint32(ids[i+3])<<24)
		m, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_DESCRIBE, id, uintptr(unsafe.Pointer(&desc[0])), uintptr(len(desc)), 0, 0)
		if e != 0 || m == 0 {
			fmt.Printf("  %d %v\n", id, e)
			continue
		}
		// type;uid;gid;perm;description
		f := strings.SplitN(strings.TrimRight(string(desc[:min(m, uintptr(len(desc)))]), "\x00"), ";", 5)
		if len(f) == 5 {
			fmt.Printf("  %d %s: %s\n", id, f[0], f[4])
		}
	}
}

// procloop reads the container's /proc files through their bind mounts
// in a loop while the test switches daemons under them: a phase is the
// time between two of the test's marks (/switch-N in the container's
// root, made once a switch is done). Each phase it adds a key of its own
// and says when it first sees it in /proc/keys; at a phase's end it says
// how many reads it made and how many failed.
func procloop(desc, other string) {
	const userKeyring = 0xfffffffc
	add := func(d string) unix.Errno {
		v := []byte("v")
		_, _, e := unix.Syscall6(unix.SYS_ADD_KEY, cstr("user"), cstr(d), uintptr(unsafe.Pointer(&v[0])), 1, userKeyring, 0)
		return e
	}
	if e := add(desc); e != 0 {
		fmt.Println("add", e)
		return
	}
	fmt.Println("add ok")
	own := []string{desc}
	seen := true
	phase, reads, failures := 0, 0, 0
	var first error
	var slowest time.Duration
	report := func() {
		fmt.Printf("phase %d reads %d failures %d slowest %v first %v\n", phase, reads, failures, slowest.Round(time.Millisecond), first)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, unix.SIGTERM)
	for i := 0; ; i++ {
		if i%16 == 0 {
			if _, err := os.Stat("/stop"); err == nil || len(stop) > 0 {
				break
			}
			if _, err := os.Stat(fmt.Sprintf("/switch-%d", phase+1)); err == nil {
				report()
				phase++
				reads, failures, first, slowest = 0, 0, nil, 0
				d := fmt.Sprintf("%s-%d", desc, phase)
				if e := add(d); e != 0 {
					fmt.Println("add", d, e)
				} else {
					own, seen = append(own, d), false
				}
			}
		}
		start := time.Now()
		var err error
		if i%2 == 0 {
			var b []byte
			if b, err = os.ReadFile("/proc/keys"); err == nil {
				for _, d := range own {
					if !strings.Contains(string(b), " "+d+": ") {
						err = fmt.Errorf("/proc/keys without %s", d)
					}
				}
				if strings.Contains(string(b), " "+other) {
					err = fmt.Errorf("/proc/keys with %s", other)
				}
			}
			if err == nil && !seen {
				seen = true
				fmt.Printf("phase %d sees %s\n", phase, own[len(own)-1])
			}
		} else {
			var b []byte
			if b, err = os.ReadFile("/proc/sys/kernel/keys/maxkeys"); err == nil {
				_, err = strconv.Atoi(strings.TrimSpace(string(b)))
			}
		}
		slowest = max(slowest, time.Since(start))
		reads++
		if err != nil {
			failures++
			if first == nil {
				first = fmt.Errorf("read %d: %w", reads, err)
			}
		}
	}
	report()
	fmt.Println("procloop done")
}
