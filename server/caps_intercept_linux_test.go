package server_test

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
)

func init() { testChildren["capabilities"] = capabilitiesChild }

// capabilitiesChild asks KEYCTL_CAPABILITIES and says whether
// notifications are among them.
func capabilitiesChild() {
	startIntercepted(false)
	caps := make([]byte, 2)
	n, s := keyctl(unix.KEYCTL_CAPABILITIES, uintptr(unsafe.Pointer(&caps[0])), uintptr(len(caps)))
	if n < 0 {
		fmt.Println("capabilities:", s)
		return
	}
	fmt.Printf("notifications %v\n", caps[1]&keys.Cap2Notifications != 0)
}

// An intercepted program is not told that notifications are there: its
// KEYCTL_WATCH_KEY would need a watch queue of the kernel's, which the
// daemon cannot post into. keyutils' keyctl supports said have_notify=1
// under ukeyctl run, and its test suite then ran every test inside a
// keyctl watch_session that could not start. A client of the socket
// gets them (OpWatchNext), and is told so.
func TestInterceptedCapabilitiesSayNoNotifications(t *testing.T) {
	if got := runIntercepted(t, "capabilities"); got != "notifications false\n" {
		t.Fatalf("an intercepted program's KEYCTL_CAPABILITIES: %q, want notifications false", got)
	}
	svc := keys.New()
	defer svc.Close()
	c := svc.NewCaller(keys.Cred{UID: 1000, GID: 1000})
	defer c.Release()
	if caps := c.Capabilities(); caps[1]&keys.Cap2Notifications == 0 {
		t.Fatal("the socket's capabilities lost notifications, which it serves")
	}
}
