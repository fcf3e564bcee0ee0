package server_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

// childRead runs in a child process: it reads key UKEYS_TEST_KEY.
func childRead() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	id, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_KEY"))
	b, err := c.Read(keys.Serial(id))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("read %s\n", b)
}

// Two real uids share one daemon: the daemon learns the second from the
// socket, and the key's permissions decide.
func TestTwoRealUIDs(t *testing.T) {
	ukeystest.NeedRoot(t, "to run a child as another uid")
	const nobody = 65534
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755))
	// The child must be able to execute a copy of this test binary.
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	sock := d.Socket
	root := d.Dial(t)
	id, err := root.AddKey("user", "root-secret", []byte("only-root"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = []string{"UKEYS_TEST_CHILD=read", "UKEYS_SOCKET=" + sock, "UKEYS_TEST_KEY=" + fmt.Sprint(id)}
		cmd.SysProcAttr = ukeystest.As(nobody, nobody)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as uid %d: %v\n%s", nobody, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := read(); !strings.Contains(got, "Permission denied") {
		t.Fatalf("uid %d reading root's key: %q, want EACCES", nobody, got)
	}
	// Grant other read (and the view that lookups need).
	if err := root.SetPerm(id, keys.PossAll|keys.UserAll|keys.View|keys.Read); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "read only-root" {
		t.Fatalf("uid %d after setperm: %q", nobody, got)
	}
}
