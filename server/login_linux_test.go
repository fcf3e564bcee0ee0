package server_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

func init() { testChildren["login"] = loginChild }

// loginChild runs in a child process, as one command of a login shell
// would: it connects with no session token and does UKEYS_TEST_STEP to
// its session keyring, printing one line.
func loginChild() {
	if want := os.Getenv("UKEYS_TEST_WANT_PID"); want != "" && want != strconv.Itoa(os.Getpid()) {
		fmt.Println("pid", os.Getpid())
		return
	}
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	switch step := os.Getenv("UKEYS_TEST_STEP"); step {
	case "job":
		// A job that daemonizes after it started: it takes its login's
		// session keyring, leaves the login (setsid) and holds on.
		_, err := c.Search(keys.SessionKeyring, "user", "greeting", 0)
		if err == nil {
			_, err = syscall.Setsid()
		}
		fmt.Println("job", errText(err))
		if err != nil {
			return
		}
		select {}
	case "add":
		_, err = c.AddKey("user", "greeting", []byte("hello"), keys.SessionKeyring)
		fmt.Println("add", errText(err))
	case "find":
		id, err := c.Search(keys.SessionKeyring, "user", "greeting", 0)
		if err != nil {
			fmt.Println("find", errText(err))
			return
		}
		b, err := c.Read(id)
		fmt.Println("find", string(b), errText(err))
	case "describe":
		// The session keyring, and what is linked in it.
		d, err := c.Describe(keys.SessionKeyring)
		if err != nil {
			fmt.Println("describe", errText(err))
			return
		}
		b, err := c.Read(keys.SessionKeyring) // serials, 4 bytes each
		var in []string
		for i := 0; i+4 <= len(b); i += 4 {
			s, _ := c.Describe(keys.Serial(int32(binary.LittleEndian.Uint32(b[i:]))))
			in = append(in, s)
		}
		fmt.Printf("describe %s holding %s %s\n", d, strings.Join(in, ","), errText(err))
	default:
		fmt.Println("unknown step", step)
	}
}

func errText(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// loginRun runs script with sh as the leader of a new POSIX session (a
// login), with T standing for this test binary playing loginChild, and
// returns what it printed.
func loginRun(t *testing.T, bin, sock, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "UKEYS_SOCKET=" + sock, "UKEYS_TEST_CHILD=login", "T=" + bin}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// The processes of one login share a session keyring that the daemon
// makes as pam_keyinit would (an anonymous _ses keyring with the user
// keyring linked in), although none of them has a session of its own:
// what one adds to @s, the next finds. Another login does not see it,
// and the keyring goes when the login ends.
func TestLoginSharesSession(t *testing.T) {
	d := ukeystest.NewDaemon(t, ukeystest.WithConfig(server.Config{ProcessPoll: 10 * time.Millisecond}))
	bin := os.Args[0]
	uid, gid := os.Getuid(), os.Getgid()
	// This test's own process may have a login keyring of its own, or none
	// (when its session's leader is outside its pid namespace, /proc shows
	// session 0, as in a container): count what it sees before the logins.
	view := d.Dial(t)
	pk, err := view.ProcKeys()
	if err != nil {
		t.Fatal(err)
	}
	own := strings.Count(pk, " _ses:")
	got := loginRun(t, bin, d.Socket, `UKEYS_TEST_STEP=add "$T"; UKEYS_TEST_STEP=find "$T"; UKEYS_TEST_STEP=describe "$T"; :`)
	lines := strings.Split(got, "\n")
	ses := fmt.Sprintf("describe keyring;%d;%d;%08x;_ses holding ", uid, gid, uint32(keys.PermSessionAnon))
	if len(lines) != 3 || lines[0] != "add ok" || lines[1] != "find hello ok" || !strings.HasPrefix(lines[2], ses) ||
		!strings.Contains(lines[2], fmt.Sprintf(";%08x;_uid.%d,user;", uint32(keys.PermUserKeyring), uid)) || !strings.HasSuffix(lines[2], ";greeting ok") {
		t.Fatalf("one login, three processes:\n%s\nwant add, find, and %s_uid.%d,…greeting", got, ses, uid)
	}
	// Another login: a session of its own, without the greeting.
	if got := loginRun(t, bin, d.Socket, `UKEYS_TEST_STEP=find "$T"; :`); got != "find error: search: Required key not available" {
		t.Fatalf("another login: %q", got)
	}
	// Both logins have ended: their keyrings go with them.
	defer func() {
		if t.Failed() {
			t.Logf("%d _ses wanted, /proc/keys:\n%s", own, pk)
		}
	}()
	testutil.Eventually(t, "the logins' keyrings to go", func() bool {
		pk, err = view.ProcKeys()
		// What is left is this test's own login's, if it has one.
		return err == nil && !strings.Contains(pk, "greeting") && strings.Count(pk, " _ses:") == own
	})
}

// In a container the daemon runs in a pid namespace of its own, where
// the kernel's process events connector does not serve it (its pids are
// the host's): a logins' keyrings must still go when the logins end, and
// no process be given another's session by a host pid that means another
// process here. TestLoginSharesSession runs again in a new pid namespace,
// where this test process (its login leader outside) has session 0.
func TestLoginSharesSessionInPidNamespace(t *testing.T) {
	if os.Getenv("UKEYS_TEST_IN_PIDNS") != "" {
		t.Skip("already in a pid namespace of its own")
	}
	ukeystest.NeedRoot(t, "to make a pid namespace")
	inPidNamespace(t, "TestLoginSharesSession", true, "UKEYS_TEST_IN_PIDNS=1")
}

// inPidNamespace runs this test binary's test again in a new pid
// namespace (unshare --pid --fork; with mountProc, its own /proc), with
// env added to the environment, and fails unless it passes there.
func inPidNamespace(t *testing.T, test string, mountProc bool, env string) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	args := []string{"--pid", "--fork"}
	if mountProc {
		args = append(args, "--mount-proc")
	}
	cmd := exec.Command(unshare, append(args, os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")...)
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s in a pid namespace of its own (its own /proc: %v): %v\n%s", test, mountProc, err, out)
	}
}

// The audit session id, where the system sets one (pam_loginuid does at
// each login), names the login rather than the POSIX session: two
// commands of one audit session in different POSIX sessions (setsid)
// share the keyring; a process of another uid in that login has its own.
func TestLoginByAuditSession(t *testing.T) {
	ukeystest.NeedRoot(t, "to start an audit session (writing /proc/self/loginuid) and to run a process as another uid")
	if out, err := exec.Command("/bin/sh", "-c", "echo 0 >/proc/self/loginuid").CombinedOutput(); err != nil {
		t.Skipf("cannot start an audit session here (no audit support in the kernel?): %v %s", err, out)
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid (util-linux)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755), ukeystest.WithConfig(server.Config{ProcessPoll: 10 * time.Millisecond}))
	bin := filepath.Join(d.Dir, "child.test")
	ukeystest.CopyExecutable(t, os.Args[0], bin)
	// The leader starts an audit session; each command runs in a POSIX
	// session of its own.
	got := loginRun(t, bin, d.Socket, `echo 0 >/proc/self/loginuid &&
UKEYS_TEST_STEP=add setsid -w "$T" && UKEYS_TEST_STEP=find setsid -w "$T" &&
UKEYS_TEST_STEP=find setsid -w setpriv --reuid=65534 --regid=65534 --clear-groups "$T"; :`)
	want := "add ok\nfind hello ok\nfind error: search: Required key not available"
	if got != want {
		t.Fatalf("one audit session, three POSIX sessions:\n%s\nwant\n%s", got, want)
	}
}

// With logins off, a process without a session has the kernel's: @s with
// create semantics is a session keyring of its own, gone with it.
func TestLoginSessionsOff(t *testing.T) {
	d := ukeystest.NewDaemon(t, ukeystest.WithConfig(server.Config{NoLogins: true}))
	got := loginRun(t, os.Args[0], d.Socket, `UKEYS_TEST_STEP=add "$T"; UKEYS_TEST_STEP=find "$T"; :`)
	if got != "add ok\nfind error: search: Required key not available" {
		t.Fatalf("two processes of one login, logins off:\n%s", got)
	}
}

// A login is found again by its anchor, never by its session's number:
// login A's leader (pid P) adds a key to @s and starts a job that
// daemonizes (setsid) holding A's keyring; once the leader has exited,
// a new process of the same uid given pid P starts a session of its own
// (setsid: session id P, as A's was). It must not possess A's keys.
// Runs in a pid namespace of its own, where ns_last_pid chooses the pid.
func TestLoginNotFoundByReusedSessionID(t *testing.T) {
	if os.Getenv("UKEYS_TEST_IN_PIDNS") == "" {
		ukeystest.NeedRoot(t, "to make a pid namespace and choose the next pid there (ns_last_pid)")
		inPidNamespace(t, "TestLoginNotFoundByReusedSessionID", true, "UKEYS_TEST_IN_PIDNS=1")
		return
	}
	if b, err := os.ReadFile("/proc/self/sessionid"); err == nil && strings.TrimSpace(string(b)) != "4294967295" {
		t.Skipf("this process is in audit session %s, which names its logins (never reused): the attack needs POSIX sessions", strings.TrimSpace(string(b)))
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithConfig(server.Config{ProcessPoll: 10 * time.Millisecond}))
	bin, dir := os.Args[0], t.TempDir()
	got := loginRun(t, bin, d.Socket, `echo $$ >"$D/leader"; UKEYS_TEST_STEP=add "$T"
UKEYS_TEST_STEP=job "$T" >"$D/job" 2>&1 & echo $! >"$D/jobpid"
while ! grep -q job "$D/job"; do sleep 0.01; done; cat "$D/job"`, "D="+dir)
	if got != "add ok\njob ok" {
		t.Fatalf("login A: %q, want add ok, job ok", got)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "jobpid"))
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	} else {
		t.Fatalf("job pid %q", b)
	}
	b, _ = os.ReadFile(filepath.Join(dir, "leader"))
	leader, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if leader <= 1 {
		t.Fatalf("leader pid %q", b)
	}
	// The leader is gone (loginRun waited for it) and the job left its
	// session: pid P is free. Start processes until one gets it.
	for try := 0; ; try++ {
		if try == 50 {
			t.Fatalf("no new process got pid %d", leader)
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(leader-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid (ns_last_pid, root): %v", err)
		}
		cmd := exec.Command(bin)
		cmd.Env = []string{"UKEYS_SOCKET=" + d.Socket, "UKEYS_TEST_CHILD=login", "UKEYS_TEST_STEP=find", "UKEYS_TEST_WANT_PID=" + strconv.Itoa(leader)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("new process: %v\n%s", err, out)
		}
		got := strings.TrimSpace(string(out))
		if strings.HasPrefix(got, "pid ") {
			continue // another process or thread took pid P first
		}
		if got != "find error: search: Required key not available" {
			t.Fatalf("a new process of the uid given login A's leader's pid %d, in a session of its own, found A's key: %q", leader, got)
		}
		return
	}
}
