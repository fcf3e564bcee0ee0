package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/ukeystest"
)

// A scenario is a shell script that a user runs in a fresh session
// (keyctl session - sh -c script), once with the kernel's keyctl on its
// PATH and once with ukeyctl as keyctl against one daemon, as the uid
// given and with the setpriv options given. Its output must be the same;
// serial numbers are not printed, so nothing is masked.
type scenario struct {
	name    string
	setpriv []string // options for setpriv(1); none: run as root, as the test
	script  string
	// differs says why ukeys answers otherwise today. A scenario that
	// differs without it fails, and so does one that no longer differs
	// with it: the mark goes when the difference does.
	differs string
	// runDiffers is differs for the scenario run with the kernel's own
	// keyctl under ukeyctl run (its system calls served by ukeyd).
	runDiffers string
	// needsForks: ukeys answers as the kernel only where the daemon
	// follows forks (server.Stats.FollowsForks).
	needsForks bool
}

// uidOpts runs a scenario as uid (and gid) with no supplementary groups.
func uidOpts(uid string) []string {
	return []string{"--reuid=" + uid, "--regid=" + uid, "--clear-groups"}
}

// Issue 15's scenarios: how processes and sessions inherit keyrings, and
// what a user is charged and allowed, as the kernel keeps them.
var scenarios = []scenario{
	{
		name: "quota: the user keyrings are not charged until used",
		// 200 keys for a non-root user: the session keyring and 199 keys.
		setpriv: uidOpts("1003"),
		script: `i=0
while keyctl add user "k$i" v @s >/dev/null 2>err; do i=$((i+1)); done
echo "added $i"; cat err`,
	},
	{
		name:   "security label without an LSM",
		script: `keyctl security @s; echo "rc=$?"`,
	},
	{
		// The kernel drops a keyring's reference to an unlinked key in an
		// RCU callback: for a grace period after the unlink, the key can
		// still be looked up (an expired one then says EKEYEXPIRED), and
		// a command started at once may see it or not. Once the period
		// has passed, it is gone in both.
		name: "a key that lost its last link is gone once a grace period has passed",
		script: `k=$(keyctl add user d v @s); keyctl timeout $k 1; sleep 2
keyctl unlink $k @s; sleep 1; keyctl describe $k >/dev/null; echo "rc=$?"`,
	},
	{
		name: "a setuid child keeps the session it inherited",
		script: `k=$(keyctl add user s v @s)
setpriv --reuid=65534 --regid=65534 --clear-groups keyctl print $k; echo "rc=$?"`,
	},
	{
		name: "an empty environment keeps the session",
		script: `keyctl add user e v @s >/dev/null
env -i PATH="$PATH" UKEYS_SOCKET="$UKEYS_SOCKET" UKEYS_NO_AUTOSTART=1 keyctl print %user:e; echo "rc=$?"`,
	},
	{
		name: "a background job keeps the session after its shell exits",
		// Its shell has exited when it first calls: only the fork, seen
		// as it happened, tells whose child it was.
		needsForks: true,
		script: `keyctl session - sh -c 'keyctl add user bgkey v @s >/dev/null; (sleep 1; keyctl print %user:bgkey; echo "rc=$?") &'
sleep 3`,
	},
	{
		// The old session, unreferenced now, goes with the collector:
		// what a command sees of it at once is timing (as with an
		// unlinked key), so the scenario looks at the new one.
		// The calling shell (an inner sh) has never spoken to the daemon.
		name: "new_session replaces the calling shell's session",
		script: `sh -c 'keyctl add user ns v @s >/dev/null
keyctl new_session >/dev/null
keyctl add user after v @s >/dev/null
keyctl rlist @s | wc -w
keyctl search @s user ns >/dev/null 2>&1; echo "ns rc=$?"
keyctl print %user:after'`,
	},
	{
		name: "session NAME joins an existing keyring the caller may search",
		script: `keyctl newring myring @s >/dev/null
keyctl setperm %:myring 0x3f3f0000
keyctl add user in v %:myring >/dev/null
keyctl session myring keyctl print %user:in 2>&1 | grep -v '^Joined'; echo "rc=$?"`,
	},
	{
		name: "privilege is a capability, not uid 0",
		// Root without CAP_SETUID may not take another uid's persistent
		// keyring.
		setpriv: []string{"--inh-caps=-all", "--bounding-set=-all"},
		script:  `keyctl get_persistent @s 1003 >/dev/null; echo "rc=$?"`,
	},
	{
		name: "a capable non-root caller is privileged",
		// uid 1003 with CAP_SETUID (ambient, so that it survives the
		// exec of each command) may take root's persistent keyring.
		setpriv: append(uidOpts("1003"), "--inh-caps=+setuid", "--ambient-caps=+setuid"),
		script:  `keyctl get_persistent @s 0 >/dev/null; echo "rc=$?"`,
	},
}

// joined is what "keyctl session" says on stderr, with the new session's
// serial.
var joined = regexp.MustCompile(`(?m)^Joined session keyring: [0-9]+\n`)

// TestScenariosAgainstKernel runs every scenario with the kernel's keyctl
// and with ukeyctl, and counts the ones that agree.
func TestScenariosAgainstKernel(t *testing.T) {
	real := realKeyctl(t)
	ukeystest.NeedRoot(t, "scenarios run as other uids and without capabilities")
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	d := ukeystest.NewDaemon(t, ukeystest.WithDirMode(0o755), ukeystest.WithConfig(server.Config{ReadTimeout: time.Minute}))
	ours := filepath.Join(d.Dir, "bin")
	theirs := filepath.Join(d.Dir, "kernel")
	for _, dir := range []string{ours, theirs} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ukeystest.CopyExecutable(t, os.Args[0], filepath.Join(ours, "keyctl"))
	if err := os.Symlink(filepath.Join(ours, "keyctl"), filepath.Join(ours, "ukeyctl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(theirs, "keyctl")); err != nil {
		t.Fatal(err)
	}
	// The kernel's own keyctl under ukeyctl run: its system calls served
	// by the daemon, where seccomp user notification is to be had.
	runWrap := []string{filepath.Join(ours, "ukeyctl"), "run", "--"}
	probe := exec.Command(runWrap[0], "run", "--", "true")
	probe.Env = []string{"PATH=/usr/bin:/bin", "UKEYS_SOCKET=" + d.Socket, "UKEYS_NO_AUTOSTART=1"}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Logf("no ukeyctl run here (%v: %s): the kernel's keyctl is compared only with ukeyctl", err, out)
		runWrap = nil
	}
	counts := map[string][2]int{}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if sc.needsForks && !d.Server.Stats().FollowsForks {
				t.Skip("needs a daemon that follows forks (the process events connector, which the kernel serves only to its initial pid and user namespaces, to CAP_NET_ADMIN)")
			}
			kernel := runScenario(t, setpriv, theirs, "", sc, nil)
			for _, mode := range []struct {
				name    string
				dir     string
				wrap    []string
				differs string
			}{
				{"ukeyctl", ours, nil, sc.differs},
				{"keyctl under ukeyctl run", theirs, runWrap, sc.runDiffers},
			} {
				if mode.name != "ukeyctl" && runWrap == nil {
					continue
				}
				ukeys := runScenario(t, setpriv, mode.dir, d.Socket, sc, mode.wrap)
				c := counts[mode.name]
				switch agree := kernel == ukeys; {
				case agree && mode.differs == "":
					c[0]++
				case agree:
					c[0]++
					t.Errorf("%s: marked as differing (%s), but ukeys now answers as the kernel:\n%s", mode.name, mode.differs, ukeys)
				case mode.differs != "":
					c[1]++
					t.Logf("%s: known difference (%s):\n--- kernel\n%s--- ukeys\n%s", mode.name, mode.differs, kernel, ukeys)
				default:
					c[1]++
					t.Errorf("%s:\n--- kernel\n%s--- ukeys\n%s", mode.name, kernel, ukeys)
				}
				counts[mode.name] = c
			}
		})
	}
	for mode, c := range counts {
		t.Logf("scenarios, %s: %d answer as the kernel, %d differ", mode, c[0], c[1])
	}
}

// runScenario runs sc's script in a fresh session with dir's keyctl
// first on the PATH and returns what it printed and its status.
func runScenario(t *testing.T, setpriv, dir, socket string, sc scenario, wrap []string) string {
	t.Helper()
	work := t.TempDir()
	if err := os.Chmod(work, 0o777); err != nil { // the scenario's uid writes its files here
		t.Fatal(err)
	}
	argv := []string{filepath.Join(dir, "keyctl"), "session", "-", "/bin/sh", "-c", sc.script}
	argv = append(wrap[:len(wrap):len(wrap)], argv...)
	if len(sc.setpriv) > 0 {
		argv = append(append([]string{setpriv}, sc.setpriv...), argv...)
	}
	cmd := boundedCommand(t, argv[0], argv[1:]...)
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + dir + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + work, "LC_ALL=C"}
	if socket != "" {
		cmd.Env = append(cmd.Env, "UKEYS_SOCKET="+socket, "UKEYS_NO_AUTOSTART=1", "GORACE=atexit_sleep_ms=0")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.hung() {
		t.Fatalf("%v still running after %v: killed\nstdout:\n%s\nstderr:\n%s", argv, commandBound, stdout.String(), stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", argv[0], err)
	}
	return result{Stdout: stdout.String(), Stderr: joined.ReplaceAllString(stderr.String(), ""), Code: code}.String()
}
