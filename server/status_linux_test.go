package server_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

func init() { testChildren["status"] = statusChild }

// statusChild asks the daemon at UKEYS_SOCKET for its status and says
// whether it listed the namespaces, and whether a container's id is in
// it.
func statusChild() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	text, err := c.Status()
	if err != nil {
		fmt.Println("status:", err)
		os.Exit(1)
	}
	_, listed, err := wire.ParseNamespaces(text)
	fmt.Println("listed:", listed, err, "ids:", strings.Contains(text, "secret-ctr"))
}

// The daemon's status lists the seccomp agent's namespaces to a caller
// as privileged as itself, through the socket, and to no other: neither
// another uid nor root without the daemon's capabilities learns a
// container's id.
func TestStatusListsNamespacesToThePrivileged(t *testing.T) {
	ukeystest.NeedRoot(t, "to run children as another uid and as root without capabilities")
	nss := []wire.NamespaceStatus{
		{Kind: "pod", ID: "secret-pod", Containers: []string{"secret-ctr", "sidecar"}, Keys: 3, Bytes: 120, Processes: 2, Calls: 7, Refusals: 1},
		{Kind: "container", ID: "own", Containers: []string{"own"}, Keys: 1, Bytes: 10, Processes: 1, Calls: 1},
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755),
		ukeystest.WithConfig(server.Config{Namespaces: func() []wire.NamespaceStatus { return nss }}))
	got, listed, err := d.Dial(t).Namespaces()
	if err != nil || !listed || !reflect.DeepEqual(got, nss) {
		t.Fatalf("root's Namespaces() = %+v, %v, %v; want %+v", got, listed, err, nss)
	}
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	run := func(cmd *exec.Cmd) string {
		t.Helper()
		cmd.Env = []string{"UKEYS_TEST_CHILD=status", "UKEYS_SOCKET=" + d.Socket}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	const unlisted = "listed: false <nil> ids: false"
	nobody := exec.Command(bin, "-test.run=^$")
	nobody.SysProcAttr = ukeystest.As(65534, 65534)
	if got := run(nobody); got != unlisted {
		t.Errorf("uid 65534's status: %s", got)
	}
	if setpriv, err := exec.LookPath("setpriv"); err != nil {
		t.Log("no setpriv (util-linux): root without capabilities not tried")
	} else if got := run(exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", bin, "-test.run=^$")); got != unlisted {
		t.Errorf("capless root's status: %s", got)
	}
	if got := run(exec.Command(bin, "-test.run=^$")); got != "listed: true <nil> ids: true" {
		t.Errorf("root's status from a child: %s", got)
	}
}
