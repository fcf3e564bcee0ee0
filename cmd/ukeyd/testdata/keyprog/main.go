// Command keyprog is what TestRuncContainers runs inside a container: it
// makes the kernel's own key system calls, which the container's seccomp
// profile hands to ukeyd's agent.
//
//	keyprog add DESC [SECONDS]    add a user key DESC to @u, then wait
//	keyprog search DESC           search @u for it
package main

import (
	"fmt"
	"os"
	"strconv"
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
