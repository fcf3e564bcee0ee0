package server_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

// The stock /sbin/request-key, run as the daemon's helper under
// interception (Helper.Intercept), with the stock /etc/request-key.conf:
// its own calls (assume_authority, reading the callout from the
// authorisation key) and those of the programs it runs (|/bin/cat for
// debug:loop:*, "keyctl negate" for a debug:* key whose callout says
// "negate") act on ukeys with the upcall's authority, as the kernel
// serves its helpers; the kernel's keyrings see none of it.
func TestStockHelperUnderInterception(t *testing.T) {
	stock := "/sbin/request-key"
	if _, err := os.Stat(stock); err != nil {
		t.Skip("needs keyutils' /sbin/request-key")
	}
	conf, err := os.ReadFile("/etc/request-key.conf")
	if err != nil || !strings.Contains(string(conf), "debug:loop:*") {
		t.Skip("needs keyutils' stock /etc/request-key.conf (its debug:loop:* line)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build ukeyctl")
	}
	dir := t.TempDir()
	build := exec.Command(gobin, "build", "-o", dir, "github.com/ukeys/ukeys/cmd/ukeyctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ukeyctl: %v\n%s", err, out)
	}
	ukeyctl := filepath.Join(dir, "ukeyctl")
	d := ukeystest.NewDaemon(t, ukeystest.WithHelper(stock), ukeystest.WithHelperIntercepted(ukeyctl),
		ukeystest.WithKeys(keys.WithUpcallTimeout(20*time.Second)))
	probe := exec.Command(ukeyctl, "run", "--", "true")
	probe.Env = []string{"PATH=/usr/bin:/bin", "UKEYS_SOCKET=" + d.Socket, "UKEYS_NO_AUTOSTART=1"}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("no ukeyctl run here: %v: %s", err, out)
	}
	c := d.Dial(t)
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	// "create user debug:loop:* * |/bin/cat": the callout, through cat.
	id, err := c.RequestKey("user", "debug:loop:ukeys", []byte("made by the stock request-key"), keys.SessionKeyring)
	if err != nil {
		t.Fatalf("request_key debug:loop:ukeys: %v", err)
	}
	if b, err := c.Read(id); err != nil || string(b) != "made by the stock request-key" {
		t.Fatalf("the key: %q, %v", b, err)
	}
	// "create user debug:* negate /bin/keyctl negate %k 30 %S".
	if _, err := c.RequestKey("user", "debug:ukeys-negated", []byte("negate"), keys.SessionKeyring); !errors.Is(err, keys.ENOKEY) {
		t.Fatalf("request_key of a key the helper negates: %v, want ENOKEY", err)
	}
	if pk, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(pk), "debug:loop:ukeys") {
		t.Errorf("the kernel holds the key:\n%s", pk)
	}
}
