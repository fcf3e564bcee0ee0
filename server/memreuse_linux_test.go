package server_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/internal/sharedvm"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

// fixedAddr is an address the attacker and the victim both map, where
// the victim asks for its key's payload.
const fixedAddr = 0x7e0000000000

func init() {
	testChildren["memreuse"] = memReuseChild
	testChildren["memreuse-attacker"] = memReuseAttacker
	testChildren["memreuse-victim"] = memReuseVictim
	testChildren["vmexec"] = vmExecChild
	testChildren["vmexec-after"] = vmExecAfter
}

// mapFixed maps a page at fixedAddr.
func mapFixed() []byte {
	p, _, e := unix.Syscall6(unix.SYS_MMAP, fixedAddr, 4096, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if e != 0 {
		fmt.Println("mmap:", e)
		os.Exit(1)
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), 4096)
}

// memReuseAttacker makes a process X that shares its memory (sharedvm)
// make one key call and exit, says X's pid, and keeps X's memory, which
// maps fixedAddr, alive. Told to, it says what is at fixedAddr.
func memReuseAttacker() {
	page := mapFixed()
	x, err := sharedvm.Run([]sharedvm.Call{{Nr: unix.SYS_KEYCTL, Args: [6]uintptr{unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0}}})
	if err != nil {
		fmt.Println("sharedvm:", err)
		os.Exit(1)
	}
	var ws unix.WaitStatus
	unix.Wait4(x, &ws, 0, nil) // X's pid is free from here on
	fmt.Println(x)
	bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Printf("attacker's memory: %q\n", bytes.TrimRight(page[:64], "\x00"))
}

// memReuseVictim reads a key of its own into fixedAddr and says what
// it got there.
func memReuseVictim() {
	if os.Getenv("UKEYS_TEST_WANT_PID") != strconv.Itoa(os.Getpid()) {
		return
	}
	fmt.Println("pid reused")
	page := mapFixed()
	id, s := addKey("user", "victim", "the victim's secret", -3)
	if id < 0 {
		fmt.Println("add:", s)
		return
	}
	n, s := keyctl(unix.KEYCTL_READ, uintptr(id), fixedAddr, 64)
	fmt.Printf("victim read %d %s: %q\n", n, s, bytes.TrimRight(page[:64], "\x00"))
}

// memReuseChild is the tree under the filter: it starts the attacker,
// gives the victim X's pid (ns_last_pid) and reports what each said.
func memReuseChild() {
	startIntercepted(true)
	att := exec.Command(os.Args[0], "-test.run=^$")
	att.Env = append(os.Environ(), "UKEYS_TEST_CHILD=memreuse-attacker")
	ain, _ := att.StdinPipe()
	aout, _ := att.StdoutPipe()
	att.Stderr = os.Stderr
	if err := att.Start(); err != nil {
		fmt.Println("attacker:", err)
		return
	}
	ar := bufio.NewReader(aout)
	line, _ := ar.ReadString('\n')
	x, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		fmt.Printf("attacker said %q\n", line)
		return
	}
	ns, err := os.OpenFile("/proc/sys/kernel/ns_last_pid", os.O_WRONLY, 0)
	if err != nil {
		fmt.Println("ns_last_pid:", err)
		return
	}
	last := []byte(strconv.Itoa(x - 1))
	victim := execCall("memreuse-victim", "UKEYS_TEST_WANT_PID="+strconv.Itoa(x))
	reused := false
	for try := 0; try < 100 && !reused; try++ {
		// The write, then at once the clone that takes the next pid:
		// no Go scheduling in between to start a thread (which would).
		if _, _, e := unix.RawSyscall6(unix.SYS_PWRITE64, ns.Fd(), uintptr(unsafe.Pointer(&last[0])), uintptr(len(last)), 0, 0, 0); e != 0 {
			fmt.Println("ns_last_pid:", e)
			return
		}
		v, err := sharedvm.Run([]sharedvm.Call{victim})
		if err != nil {
			fmt.Println("victim:", err)
			return
		}
		// A victim given another pid says nothing.
		var ws unix.WaitStatus
		unix.Wait4(v, &ws, 0, nil)
		reused = v == x
	}
	if !reused {
		fmt.Println("no victim was given X's pid")
		return
	}
	ain.Write([]byte("\n"))
	rest, _ := ar.ReadString('\n')
	fmt.Print(rest)
	att.Wait()
}

// A process X makes a key call and exits, while its memory lives on in
// a process that shared it (here its vfork parent, the attacker); a
// victim is given X's pid and reads a key of its own. The listener kept
// one /proc/<pid>/mem per pid, which it believed still the caller's
// while the call's instruction pointer read through it (the same
// program: it did): the daemon wrote the victim's payload into the
// attacker's memory, and the victim read nothing.
func TestResultsGoToTheCallersOwnMemoryWhenItsPidIsReused(t *testing.T) {
	if !sharedvm.Supported {
		t.Skip("no sharedvm on this platform")
	}
	if os.Geteuid() != 0 {
		t.Skip("giving the victim X's pid needs root (ns_last_pid)")
	}
	said := runIntercepted(t, "memreuse")
	if strings.Contains(said, "no victim was given") {
		t.Skip("another process took X's pid every time")
	}
	want := "pid reused\nvictim read 19 ok: \"the victim's secret\"\nattacker's memory: \"\"\n"
	if said != want {
		t.Fatalf("the attack:\n%s\nwant:\n%s", said, want)
	}
}

// vmExecChild: a process E that shares this one's memory makes a
// process and a thread keyring with a key in each, and execs this
// program (vmexec-after), while its old memory lives on here. Then it
// says what is at fixedAddr here.
func vmExecChild() {
	startIntercepted(true)
	page := mapFixed()
	typ, desc, payload := []byte("user\x00"), []byte("old image's\x00"), []byte("secret")
	add := func(ring int32) sharedvm.Call {
		return sharedvm.Call{Nr: unix.SYS_ADD_KEY, Args: [6]uintptr{uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
			uintptr(unsafe.Pointer(&payload[0])), uintptr(len(payload)), uintptr(uint32(ring))}}
	}
	e, err := sharedvm.Run([]sharedvm.Call{
		add(-2), add(-1),
		execCall("vmexec-after"),
	})
	runtime.KeepAlive(typ)
	runtime.KeepAlive(desc)
	runtime.KeepAlive(payload)
	if err != nil {
		fmt.Println("sharedvm:", err)
		return
	}
	var ws unix.WaitStatus
	unix.Wait4(e, &ws, 0, nil)
	fmt.Printf("old image's memory: %q\n", bytes.TrimRight(page[:64], "\x00"))
}

// vmExecAfter, the new program: what it finds of @p and @t, and whether
// a key's payload reaches its own memory.
func vmExecAfter() {
	page := mapFixed()
	for _, ring := range []int32{-2, -1} {
		_, s := keyctl(unix.KEYCTL_GET_KEYRING_ID, uintptr(uint32(ring)), 0)
		fmt.Printf("@%s after exec: %s\n", map[int32]string{-2: "p", -1: "t"}[ring], s)
	}
	id, s := addKey("user", "new image's", "the new image's", -3)
	if id < 0 {
		fmt.Println("add:", s)
		return
	}
	n, s := keyctl(unix.KEYCTL_READ, uintptr(id), fixedAddr, 64)
	fmt.Printf("read %d %s: %q\n", n, s, bytes.TrimRight(page[:64], "\x00"))
}

// A process E whose memory outlives its exec (a vfork child's lives on
// in its parent) makes keyrings, then execs: the new program must find
// neither its thread nor its process keyring, and its results must
// reach its own memory. The listener guessed an exec from the memory it
// had kept of E, which still read: it saw none, kept @p and @t, and
// wrote the new program's results into the old image.
func TestAnExecIsSeenWhenTheOldImageLivesOn(t *testing.T) {
	if !sharedvm.Supported {
		t.Skip("no sharedvm on this platform")
	}
	d := ukeystest.NewDaemon(t)
	d.Dial(t).Close() // the daemon has begun to serve, and to follow processes where it can
	for i := 0; i < 100 && !d.Server.Stats().FollowsForks; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	said := runInterceptedOn(t, d.Server, "vmexec")
	if !d.Server.Stats().FollowsForks && strings.HasPrefix(said, "@p after exec: ok\n@t after exec: ok\n") {
		// Seen only where the old image's memory no longer maps the new
		// program's instruction pointer (here it does: the same
		// program), or the daemon follows processes.
		t.Skipf("the daemon does not follow processes here (no process events connector):\n%s", said)
	}
	want := "@p after exec: required key not available\n@t after exec: required key not available\n" +
		"read 15 ok: \"the new image's\"\nold image's memory: \"\"\n"
	if said != want {
		t.Fatalf("after the exec:\n%s\nwant:\n%s", said, want)
	}
}

// runInterceptedOn is runIntercepted with a server of the caller's (one
// that serves a socket, and so follows processes where it can).
func runInterceptedOn(t *testing.T, srv *server.Server, role string) string {
	t.Helper()
	return runFiltered(t, role, srv.ServeListener)
}

// keepAlive holds what sharedvm calls point to, which they name by
// address only, for as long as the test child runs.
var keepAlive []any

// execCall is an execve of this program as child role, with this
// environment and env, its arguments kept on the heap for sharedvm.
func execCall(role string, env ...string) sharedvm.Call {
	exe, _ := os.Executable()
	path := append([]byte(exe), 0)
	arg1 := []byte("-test.run=^$\x00")
	argv := []*byte{&path[0], &arg1[0], nil}
	var envs [][]byte
	for _, e := range append(os.Environ(), env...) {
		if !strings.HasPrefix(e, "UKEYS_TEST_CHILD=") {
			envs = append(envs, append([]byte(e), 0))
		}
	}
	envs = append(envs, []byte("UKEYS_TEST_CHILD="+role+"\x00"))
	envp := make([]*byte, 0, len(envs)+1)
	for _, e := range envs {
		envp = append(envp, &e[0])
	}
	envp = append(envp, nil)
	keepAlive = append(keepAlive, path, arg1, argv, envs, envp)
	return sharedvm.Call{Nr: unix.SYS_EXECVE, Args: [6]uintptr{uintptr(unsafe.Pointer(&path[0])), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0]))}}
}
