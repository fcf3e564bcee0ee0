package server_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

func init() {
	testChildren["caps-socket-intercepted"] = capsSocketInterceptedChild
	if r := os.Getenv("UKEYS_TEST_CHILD"); r == "caps-socket-intercepted" || r == "caps-socket-intercepted-wait" {
		runtime.LockOSThread() // the leader's calls: its process's caller, which its socket shares
	}
	testChildren["caps-socket-intercepted-wait"] = capsSocketInterceptedChild
}

// capsSocketInterceptedChild, root with every capability, gives a key
// of its process keyring to another uid over the socket (CAP_SYS_ADMIN),
// makes one intercepted call from its main thread, and gives the key to
// a third uid over the socket again.
func capsSocketInterceptedChild() {
	c := childDial()
	defer c.Close()
	r, err := rawCall(c, 1, wire.OpAddKey, wire.Str("user"), wire.Str("k"), wire.Bytes([]byte("v")), wire.Int(int64(keys.ProcessKeyring)))
	if err != nil || r.Errno != 0 {
		fmt.Println("add_key:", err, r)
		return
	}
	id := r.Ints[0]
	chown := func(tag uint32, uid int64) string {
		r, err := rawCall(c, tag, wire.OpChown, wire.Int(id), wire.Int(uid), wire.Int(-1))
		if err != nil {
			return err.Error()
		}
		return errText(errnoErr(r.Errno))
	}
	fmt.Println("socket chown before:", chown(2, 4321))
	startIntercepted(false)
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffe), 0) // @p: no capability checked
	fmt.Println("intercepted:", errText(errOrNil(e)))
	if os.Getenv("UKEYS_TEST_CHILD") == "caps-socket-intercepted-wait" {
		bufio.NewReader(os.Stdin).ReadString('\n') // a hand-over meanwhile
	}
	fmt.Println("socket chown after:", chown(3, 4322))
}

// A process's socket calls count its capabilities after an intercepted
// call of its main thread as before it: the two share the process's
// keys caller, and an intercepted call's capabilities, learnt only at a
// check of that call, had made the socket's count for nothing between
// intercepted calls (a root's chown over the socket refused with
// EACCES once it had made any intercepted call).
func TestSocketCapabilitiesAfterAnInterceptedCall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a caller with CAP_SYS_ADMIN")
	}
	d := ukeystest.NewDaemon(t)
	got := runFiltered(t, "caps-socket-intercepted", d.Server.ServeListener, "UKEYS_SOCKET="+d.Socket)
	want := "socket chown before: ok\nintercepted: ok\nsocket chown after: ok\n"
	if got != want {
		t.Fatalf("said\n%s\nwant\n%s", got, want)
	}
}

// So do they once another daemon has taken the connection over, when
// the process's last call before the hand-over was intercepted: the
// capabilities it handed over count only at an intercepted call, and the
// restored connection acts as the process's caller.
func TestSocketCapabilitiesAfterAnInterceptedCallHandedOver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a caller with CAP_SYS_ADMIN")
	}
	path := filepath.Join(t.TempDir(), "ukeyd.sock")
	oldSvc, oldSrv, oldServed := oldDaemon(t, path)
	t.Setenv("UKEYS_SOCKET", path)
	c := startChild(t, "caps-socket-intercepted-wait")
	defer c.cmd.Wait()
	served := make(chan error, 1)
	go func() { served <- oldSrv.ServeListener(c.listener) }()
	c.begin()
	var said []string
	for range 2 {
		c.lines.Scan()
		said = append(said, c.lines.Text())
	}
	res, err := server.TakeOver(path, nil, server.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	<-served
	newServed := make(chan error, 1)
	go func() { newServed <- res.Server.Serve(res.Listeners[0]) }()
	fmt.Fprintln(c.in)
	c.lines.Scan()
	said = append(said, c.lines.Text())
	c.in.Close()
	want := []string{"socket chown before: ok", "intercepted: ok", "socket chown after: ok"}
	if fmt.Sprint(said) != fmt.Sprint(want) {
		t.Errorf("said %q, want %q", said, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res.Server.Shutdown(ctx)
	<-newServed
	<-oldServed
	res.Service.Close()
	oldSvc.WaitGC(ctx)
	oldSvc.Close()
}
