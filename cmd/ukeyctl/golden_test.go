package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/internal/script"
)

// The golden files in testdata/*.golden are scripts (see internal/script)
// of ukeyctl invocations with what each printed:
//
//	# a comment
//	$ keyctl add user foo bar @s      the command (shell-like quoting)
//	< bar                              a line of its stdin
//	1| K2                              a line of its stdout
//	1< text                            a last stdout line with no newline
//	2| add_key: Invalid argument       a line of its stderr
//	? 1                                its exit status, if not 0
//
// The words $UID and $GID of a command stand for the test's effective uid
// and gid. Directives: "#! sort" sorts a step's output lines by what
// follows their first word (for output in serial order), "#! root" marks
// a step whose output holds for root only, "#! compare" (first line) and
// "#! kernel-differs: why" are for TestGoldenAgainstKernel.
// Each file runs against a fresh daemon, in a session keyring of its own
// that all its commands share. Serial numbers are masked (see masker);
// the full usage text is shown as "2| <usage>". Run with -update to
// rewrite the files.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".golden")
		t.Run(name, func(t *testing.T) { runGolden(t, f) })
	}
}

// parseGolden parses a script of keyctl commands.
func parseGolden(t *testing.T, text string) []*script.Step {
	t.Helper()
	f, err := script.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return f.Steps
}

// commandArgs is a step's command, $UID and $GID replaced by the test's
// effective uid and gid.
func commandArgs(s *script.Step) []string {
	args := slices.Clone(s.Args)
	for i, a := range args {
		switch a {
		case "$UID":
			args[i] = itoa(int64(os.Geteuid()))
		case "$GID":
			args[i] = itoa(int64(os.Getegid()))
		}
	}
	return args
}

// usageTexts are the full usage texts, abbreviated in golden files.
func usageTexts() map[string]string {
	return map[string]string{
		run("keyctl", "").Stderr:  "<usage>",
		run("ukeyctl", "").Stderr: "<usage with extras>",
	}
}

// shown is r as golden files show it: the usage text abbreviated, serials
// masked, and the test user's uid and gid shown as root's.
func shown(r script.Result, m *masker, usage map[string]string) script.Result {
	for full, short := range usage {
		if strings.HasSuffix(r.Stderr, full) {
			r.Stderr = strings.TrimSuffix(r.Stderr, full) + short + "\n"
		}
	}
	r.Stdout = asRoot(m.mask(r.Stdout))
	r.Stderr = asRoot(m.mask(r.Stderr))
	return r
}

func runGolden(t *testing.T, file string) {
	d := startDaemon(t)
	sh := d.shell(t)
	m := newMasker()
	learn := func() {
		pk, err := sh.ProcKeys()
		if err != nil {
			t.Fatal(err)
		}
		m.learn(pk)
	}
	learn()
	usage := usageTexts()
	script.Run(t, file, func(_ testing.TB, s *script.Step) script.Result {
		args := commandArgs(s)
		r := run(args[0], s.Stdin, args[1:]...)
		// Let the collector finish what the command set off (an
		// invalidated key's links are pruned at once, freeing its listing
		// slot), as the kernel's does long before the next process
		// starts: the next command's listing order depends on it.
		settle(t, d)
		if s.Has("sort") {
			// Lines in serial order: order them by what follows the
			// serial instead, before the serials are masked.
			lines := strings.SplitAfter(r.Stdout, "\n")
			slices.SortFunc(lines, func(x, y string) int {
				_, x, _ = strings.Cut(x, " ")
				_, y, _ = strings.Cut(y, " ")
				return strings.Compare(x, y)
			})
			r.Stdout = strings.Join(lines, "")
		}
		learn()
		if s.Has("root") && os.Geteuid() != 0 {
			return s.Want // recorded as root; another user gets EACCES
		}
		return shown(r, m, usage)
	})
}

// asRoot rewrites the test user's uid and gid as root's (0), keeping
// field widths, so that golden files recorded as root hold for any user.
func asRoot(text string) string {
	uid, gid := itoa(int64(os.Geteuid())), itoa(int64(os.Getegid()))
	if uid == "0" && gid == "0" {
		return text
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		if !isDigit(text[i]) || i > 0 && (isAlnum(text[i-1]) || text[i-1] == '-') {
			b.WriteByte(text[i])
			i++
			continue
		}
		j := i
		for j < len(text) && isAlnum(text[j]) {
			j++
		}
		w := text[i:j]
		if w == uid || w == gid {
			if i > 0 && text[i-1] == ' ' {
				b.WriteString(strings.Repeat(" ", len(w)-1))
			}
			w = "0"
		}
		b.WriteString(w)
		i = j
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// settle waits until the daemon's collector is idle.
func settle(t *testing.T, d *daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.svc.WaitGC(ctx); err != nil {
		t.Fatal(err)
	}
}
