package hardening

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// helperArg as this test binary's first argument makes it a request-key
// helper (see helperMain); the daemon appends the kernel's arguments.
const helperArg = "hardening-helper"

// helperCmd is the helper command line for the daemon: mode then args.
func helperCmd(mode string) []string { return []string{binPath, helperArg, mode} }

// helperMain is a request-key helper that behaves as mode says; a mode
// may carry a parameter after '=' ("agent=DIR").
// args are the kernel's: create <key> <uid> <gid> <thread> <process> <session>.
func helperMain(mode string, args []string) int {
	if len(args) < 2 {
		return 2
	}
	id, _ := strconv.Atoi(args[1])
	key := keys.Serial(id)
	mode, param, _ := strings.Cut(mode, "=")
	switch mode {
	case "agent": // leaks its token into DIR/token, then serves calls as an agent
		if err := leakToken(param, args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		in, out, err := openFIFOs(param)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		defer in.Close()
		defer out.Close()
		return agentMain(in, out) // its client presents the token
	case "child": // as "agent", but the agent is a child in a process group of its own
		if err := leakToken(param, args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		in, out, err := openFIFOs(param)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), agentEnv+"=1")
		cmd.Stdin, cmd.Stdout = in, out
		// Its own process group: the kill at the upcall timeout, which
		// takes the helper's group, leaves it running, so that the test
		// can see what its connection may do afterwards.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Start()
		in.Close()
		out.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		if err := cmd.Wait(); err != nil {
			return 1
		}
		return 0
	case "instantiate": // the well-behaved helper
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return 1
		}
		defer c.Close()
		// As the kernel's request-key does: assume the authority first.
		if _, err := c.AssumeAuthority(key); err != nil {
			return 1
		}
		if err := c.Instantiate(key, []byte("constructed"), 0); err != nil {
			return 1
		}
		return 0
	case "crash":
		panic("helper crashes on purpose")
	case "hang":
		time.Sleep(time.Hour)
		return 0
	case "garbage": // abuses its authority and the protocol, then leaves
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return 1
		}
		defer c.Close()
		c.AssumeAuthority(key + 1)
		c.AssumeAuthority(key)
		c.Instantiate(key+1, []byte("wrong key"), 0)
		c.Instantiate(key, make([]byte, keys.MaxUserPayload+1), 0)
		c.Reject(key+1, 1, keys.EKEYREJECTED, 0)
		c.Read(keys.UserKeyring)
		if conn, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET")); err == nil {
			wire.WriteFrame(conn, wire.EncodeHello(wire.Version))
			wire.ReadFrame(conn, nil)
			conn.Write([]byte("\x00\x00\x00\x10this is not a request at all"))
			conn.Close()
		}
		fmt.Println("\x00\xff garbage on stdout")
		fmt.Fprintln(os.Stderr, "garbage on stderr")
		return 0
	}
	return 2
}

// leakToken writes "<token> <pid> <key>" into dir/token, whole or not at
// all: what a helper that leaks its token would let others see.
func leakToken(dir, key string) error {
	tmp := filepath.Join(dir, "token.tmp")
	line := fmt.Sprintf("%s %d %s\n", os.Getenv(client.HelperEnv), os.Getpid(), key)
	if err := os.WriteFile(tmp, []byte(line), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "token"))
}

// openFIFOs opens the helper's ends of the named pipes dir/in and dir/out
// through which the test sends calls and reads the replies; each open
// waits for the test to open the other end.
func openFIFOs(dir string) (in, out *os.File, err error) {
	if in, err = os.OpenFile(filepath.Join(dir, "in"), os.O_RDONLY, 0); err != nil {
		return nil, nil, err
	}
	if out, err = os.OpenFile(filepath.Join(dir, "out"), os.O_WRONLY, 0); err != nil {
		in.Close()
		return nil, nil, err
	}
	return in, out, nil
}
