package server

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
)

// Once every process under a listener has exited, the daemon holds
// nothing of them: the listener is no longer served or counted, the
// processes have left its table, and their thread, process and session
// keyrings are gone.
func TestListenerTreeExitReleasesAll(t *testing.T) {
	svc := keys.New()
	defer svc.Close()
	s := New(svc, Config{})
	defer s.Shutdown(t.Context())
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	// The threads child (threads_linux_test.go) makes @t and @p in two
	// threads and a session of its own.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=threads")
	cmd.ExtraFiles = []*os.File{theirs}
	out := new(strings.Builder)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	listener, err := intercept.ReceiveListener(fds[0])
	if err != nil {
		cmd.Wait()
		t.Skipf("no interception here: %v %s", err, out)
	}
	uid := uint32(os.Getuid())
	done, err := s.startListener(listener, listenerInfo{uid: uid}, intercept.HandlerFunc(s.intercepted))
	if err != nil {
		t.Fatal(err)
	}
	ours.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "@t differ: true") {
		t.Fatalf("the child's calls were not served: %s", out)
	}
	<-done
	pid := cmd.Process.Pid
	testutil.Eventually(t, "the daemon to let go of the program tree", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.listeners) == 0 && s.usage.byUID[uid] == nil && s.procs.lookup(pid) == nil
	})
	view := svc.NewCaller(keys.Cred{UID: uid, GID: uint32(os.Getgid())})
	defer view.Release()
	testutil.Eventually(t, "the tree's keyrings to go", func() bool {
		svc.WaitGC(t.Context())
		left := view.ProcKeys()
		return !strings.Contains(left, "_tid") && !strings.Contains(left, "_pid") && !strings.Contains(left, "_ses")
	})
}
