package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/internal/script"
)

// realKeyctl returns the installed keyutils keyctl, skipping the test if
// there is none or the kernel will not let it work here.
func realKeyctl(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("keyctl")
	if err != nil {
		t.Skip("keyctl (keyutils) is not installed")
	}
	if out, err := exec.Command(real, "session", "-", "true").CombinedOutput(); err != nil {
		t.Skipf("the kernel refuses keyrings here (not root, or seccomp?): %s: %v", strings.TrimSpace(string(out)), err)
	}
	return real
}

// sideBySide is a small script of keyctl commands, each of which runs as
// a process of its own in one session keyring, as in a shell.
const sideBySide = `
$ keyctl add user foo bar @s
$ keyctl padd user piped @s
< from stdin
$ keyctl newring ring @s
$ keyctl setperm %:ring 0x3f010000
$ keyctl add user inner data %:ring
$ keyctl link %user:foo %:ring
$ keyctl show
$ keyctl show -x %:ring
$ keyctl list @s
$ keyctl rlist %:ring
$ keyctl describe %user:foo
$ keyctl rdescribe @s
$ keyctl print %user:piped
$ keyctl read %user:foo
$ keyctl search @s user inner
$ keyctl list @p
$ keyctl describe @p
$ keyctl id @t
$ keyctl unlink %user:foo
$ keyctl purge -p user pip
$ keyctl timeout %user:inner 100
$ keyctl revoke %user:inner
$ keyctl print %user:inner
$ keyctl reap
$ keyctl show
$ keyctl describe @x
$ keyctl nosuchcmd
$ keyctl list
`

// TestSideBySide runs the same script with the real keyctl against the
// kernel and with ukeyctl (as keyctl, each command a process) against a
// daemon, and compares what each command printed, serials masked.
func TestSideBySide(t *testing.T) {
	real := realKeyctl(t)
	steps := parseGolden(t, sideBySide)
	kernel := runScript(t, steps, real, "")
	d := startDaemon(t)
	bin := binDir(t, "keyctl")
	ukeys := runScript(t, steps, filepath.Join(bin, "keyctl"), d.path)
	for i, s := range steps {
		if kernel[i] != ukeys[i] {
			t.Errorf("$ %s\n--- keyctl (kernel)\n%s--- ukeyctl\n%s", s.Cmd, kernel[i], ukeys[i])
		}
	}
}

// TestGoldenAgainstKernel runs the golden files marked "#! compare" with
// the real keyctl and compares each command's output with what the golden
// file says ukeyctl prints (TestGolden checks that half). A step marked
// "#! kernel-differs: why" may differ (the reason is logged); any other
// difference fails.
func TestGoldenAgainstKernel(t *testing.T) {
	real := realKeyctl(t)
	files, _ := filepath.Glob("testdata/*.golden")
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "#! compare") {
			continue
		}
		n++
		name := strings.TrimSuffix(filepath.Base(f), ".golden")
		t.Run(name, func(t *testing.T) {
			steps := parseGolden(t, string(data))
			kernel := runScript(t, steps, real, "")
			for i, s := range steps {
				want := s.Want.String()
				if kernel[i] == want {
					continue
				}
				if why, ok := s.Directive("kernel-differs"); ok {
					t.Logf("known difference (%s):\n$ %s\n--- keyctl\n%s--- ukeyctl\n%s", why, s.Cmd, kernel[i], want)
					continue
				}
				t.Errorf("$ %s\n--- keyctl (kernel)\n%s--- ukeyctl (%s)\n%s", s.Cmd, kernel[i], f, want)
			}
		})
	}
	if n == 0 {
		t.Fatal("no golden file is marked #! compare")
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runScript runs the steps with the keyctl at prog, each as a process of
// its own inside `keyctl session -`, and returns each step's rendered
// output. With socket empty the kernel is used and /proc/keys read after
// each step; otherwise the daemon at socket, whose /proc/keys view
// ukeyctl appends itself (see snapshot).
func runScript(t *testing.T, steps []*script.Step, prog, socket string) []string {
	t.Helper()
	dir := t.TempDir()
	var sh strings.Builder
	for i, s := range steps {
		args := commandArgs(s)
		if args[0] != "keyctl" {
			t.Fatalf("step %q cannot be compared", s.Cmd)
		}
		in := filepath.Join(dir, fmt.Sprintf("in.%d", i))
		if err := os.WriteFile(in, []byte(s.Stdin), 0o600); err != nil {
			t.Fatal(err)
		}
		q := []string{shellQuote(prog)}
		for _, a := range args[1:] {
			q = append(q, shellQuote(a))
		}
		pk := filepath.Join(dir, fmt.Sprintf("pk.%d", i))
		snap := "cat /proc/keys >" + shellQuote(pk)
		if socket != "" {
			snap = ":"
			q = append([]string{"UKEYCTL_TEST_SNAPSHOT=" + shellQuote(pk)}, q...)
		}
		fmt.Fprintf(&sh, "%s <%s >%s 2>%s; echo $? >%s; %s\n", strings.Join(q, " "), shellQuote(in),
			shellQuote(filepath.Join(dir, fmt.Sprintf("out.%d", i))),
			shellQuote(filepath.Join(dir, fmt.Sprintf("err.%d", i))),
			shellQuote(filepath.Join(dir, fmt.Sprintf("rc.%d", i))), snap)
	}
	script := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(script, []byte(sh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := boundedCommand(t, prog, "session", "-", "/bin/sh", script)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LC_ALL=C"}
	if socket != "" {
		env = append(env, "UKEYS_SOCKET="+socket, "UKEYS_NO_AUTOSTART=1", "GORACE=atexit_sleep_ms=0")
	}
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); cmd.hung() {
		t.Fatalf("%s session still running after %v: killed\n%s", prog, commandBound, out)
	} else if err != nil {
		t.Fatalf("%s session: %v\n%s", prog, err, out)
	}
	m := newMasker()
	results := make([]result, len(steps))
	for i := range steps {
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s.%d", name, i)))
			return string(b)
		}
		m.learn(read("pk"))
		code, err := strconv.Atoi(strings.TrimSpace(read("rc")))
		if err != nil {
			t.Fatalf("step %d: no exit status", i)
		}
		results[i] = result{Stdout: read("out"), Stderr: read("err"), Code: code}
	}
	usage := usageTexts()
	out := make([]string, len(steps))
	for i, r := range results {
		out[i] = shown(r, m, usage).String()
	}
	return out
}
