package server_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/ukeystest"
)

func init() { testChildren["userns-between"] = usernsBetweenChild }

// usernsBetween makes capability-checked key calls (chown of a key to
// another uid: CAP_SYS_ADMIN; another uid's persistent keyring:
// CAP_SETUID) and a read, then enters a user namespace of its own,
// where it holds every capability, and makes them again. In C: a
// multithreaded process (any Go program) cannot unshare its user
// namespace.
const usernsBetween = `
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *say(long r) { return r < 0 ? strerror(errno) : "ok"; }

static void calls(const char *when) {
	long k = syscall(SYS_add_key, "user", when, "secret", 6, -3);
	printf("%s add_key: %s\n", when, say(k));
	printf("%s chown: %s\n", when, say(syscall(SYS_keyctl, 4, k, 1003, -1)));
	printf("%s get_persistent: %s\n", when, say(syscall(SYS_keyctl, 22, 1003, -3)));
	char b[16];
	printf("%s read: %s\n", when, say(syscall(SYS_keyctl, 11, k, b, sizeof b)));
}

int main(void) {
	calls("before");
	if (unshare(CLONE_NEWUSER) != 0) {
		printf("unshare: %s\n", strerror(errno));
		return 1;
	}
	calls("after");
	return 0;
}
`

// usernsBetweenChild runs the program above under the filter.
func usernsBetweenChild() {
	startIntercepted(false)
	prog := os.Getenv("UKEYS_TEST_PROG")
	err := syscall.Exec(prog, []string{prog}, os.Environ())
	fmt.Println("exec:", err)
	os.Exit(1)
}

// An intercepted thread's capabilities count only in the daemon's user
// namespace, and whether it is there is learnt only at a call that
// checks one: a process with every capability that makes a user
// namespace of its own between two calls has them there, and its status
// still shows them, but a daemon that knew its namespace from an earlier
// call, or that learnt it at a call that checked none, would count them.
// Its reads still work.
func TestUserNamespaceBetweenInterceptedCalls(t *testing.T) {
	ukeystest.NeedRoot(t, "to hold capabilities in the daemon's user namespace")
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("needs a C compiler (cc), to make a process that can unshare its user namespace")
	}
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "userns.c"), filepath.Join(dir, "userns")
	if err := os.WriteFile(src, []byte(usernsBetween), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	got := runIntercepted(t, "userns-between", "UKEYS_TEST_PROG="+prog)
	want := `before add_key: ok
before chown: ok
before get_persistent: ok
before read: ok
after add_key: ok
after chown: Permission denied
after get_persistent: Operation not permitted
after read: ok
`
	if got == "unshare: Operation not permitted\n" || got == "unshare: Invalid argument\n" {
		t.Skipf("no user namespaces here: %s", got)
	}
	if got != want {
		t.Errorf("said\n%s\nwant\n%s", got, want)
	}
}
