package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
)

// usernsClientArg as the first argument makes this test binary a client
// of the daemon at UKEYS_SOCKET (usernsClient).
const usernsClientArg = "ukeyd-test-userns-client"

// usernsClient adds a secret readable by its possessor only (add) or
// reads key N (read N), prints the serial or the payload, or the error,
// says the daemon's pid (pid), and whether its status lists the seccomp
// agent's namespaces (namespaces).
func usernsClient(args []string) int {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	switch args[0] {
	case "add":
		id, err := c.AddKey("user", "secret", []byte("uid-1033-secret"), keys.UserKeyring)
		if err == nil {
			err = c.SetPerm(id, keyctl.PossAll)
		}
		if err != nil {
			fmt.Println("add:", err)
			return 1
		}
		fmt.Println(id)
	case "read":
		n, _ := strconv.Atoi(args[1])
		b, err := c.Read(keys.Serial(n))
		if err != nil {
			fmt.Println("read:", err)
			return 1
		}
		fmt.Println(string(b))
	case "namespaces":
		// Whether the status lists the agent's key namespaces.
		st, err := c.Status()
		if err != nil {
			fmt.Println("status:", err)
			return 1
		}
		if strings.Contains(st, "\nnamespaces: ") {
			fmt.Println("listed")
		} else {
			fmt.Println("not listed")
		}
	case "pid":
		st, err := c.Status()
		if err != nil {
			fmt.Println("status:", err)
			return 1
		}
		for line := range strings.Lines(st) {
			if v, ok := strings.CutPrefix(line, "pid: "); ok {
				fmt.Print(v)
			}
		}
	}
	return 0
}
