package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the commands print now")

// The golden files in testdata/*.golden are scripts of ukeyctl
// invocations with what each printed:
//
//	# a comment
//	$ keyctl add user foo bar @s      the command (shell-like quoting)
//	< bar                              a line of its stdin
//	1| K2                              a line of its stdout
//	1< text                            a last stdout line with no newline
//	2| add_key: Invalid argument       a line of its stderr
//	? 1                                its exit status, if not 0
//
// Directives are comments too: "#! sort" sorts a step's output lines
// by what follows their first word (for output in serial order), "#! root"
// marks a step whose output holds for root only, "#! compare" (first line) and
// "#! kernel-differs: why" are for TestSideBySide.
// Each file runs against a fresh daemon, in a session keyring of its own
// that all its commands share. Serial numbers are masked (see masker);
// the full usage text is shown as "2| <usage>".
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

type step struct {
	comments []string
	cmd      string
	stdin    string
	want     string
}

// has reports whether a directive comment precedes the step.
func (s step) has(directive string) bool {
	return slices.Contains(s.comments, directive)
}

func parseGolden(t *testing.T, text string) []step {
	var steps []step
	var cur *step
	var pending []string
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{comments: pending, cmd: line[2:]})
			pending = nil
			cur = &steps[len(steps)-1]
		case strings.HasPrefix(line, "#") || line == "":
			pending = append(pending, line)
		case cur == nil:
			t.Fatalf("golden line before any command: %q", line)
		case strings.HasPrefix(line, "< "):
			cur.stdin += line[2:] + "\n"
		case strings.HasPrefix(line, "<< "):
			cur.stdin += line[3:]
		default:
			cur.want += line + "\n"
		}
	}
	return steps
}

// usageTexts are the full usage texts, abbreviated in golden files.
func usageTexts() map[string]string {
	return map[string]string{
		run("keyctl", "").stderr:  "<usage>",
		run("ukeyctl", "").stderr: "<usage with extras>",
	}
}

func render(r result, m *masker, usage map[string]string) string {
	var b strings.Builder
	out := asRoot(m.mask(r.stdout))
	for out != "" {
		line, rest, nl := strings.Cut(out, "\n")
		if nl {
			fmt.Fprintf(&b, "1| %s\n", line)
		} else {
			fmt.Fprintf(&b, "1< %s\n", line)
		}
		out = rest
	}
	errs := r.stderr
	for full, short := range usage {
		if strings.HasSuffix(errs, full) {
			errs = strings.TrimSuffix(errs, full) + short + "\n"
		}
	}
	errs = asRoot(m.mask(errs))
	for _, line := range strings.SplitAfter(errs, "\n") {
		if line != "" {
			fmt.Fprintf(&b, "2| %s\n", strings.TrimSuffix(line, "\n"))
		}
	}
	if r.code != 0 {
		fmt.Fprintf(&b, "? %d\n", r.code)
	}
	return b.String()
}

func runGolden(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	steps := parseGolden(t, string(data))
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
	var out strings.Builder
	failed := false
	for _, s := range steps {
		args, err := splitArgs(s.cmd)
		if err != nil || len(args) == 0 {
			t.Fatalf("bad command %q: %v", s.cmd, err)
		}
		r := run(args[0], s.stdin, args[1:]...)
		// Let the collector finish what the command set off (an
		// invalidated key's links are pruned at once, freeing its listing
		// slot), as the kernel's does long before the next process
		// starts: the next command's listing order depends on it.
		settle(t, d)
		if s.has("#! sort") {
			// Lines in serial order: order them by what follows the
			// serial instead, before the serials are masked.
			lines := strings.SplitAfter(r.stdout, "\n")
			slices.SortFunc(lines, func(x, y string) int {
				_, x, _ = strings.Cut(x, " ")
				_, y, _ = strings.Cut(y, " ")
				return strings.Compare(x, y)
			})
			r.stdout = strings.Join(lines, "")
		}
		learn()
		got := render(r, m, usage)
		for _, c := range s.comments {
			out.WriteString(c + "\n")
		}
		out.WriteString("$ " + s.cmd + "\n")
		for _, line := range strings.SplitAfter(s.stdin, "\n") {
			switch {
			case line == "":
			case strings.HasSuffix(line, "\n"):
				out.WriteString("< " + line)
			default:
				out.WriteString("<< " + line + "\n")
			}
		}
		out.WriteString(got)
		if s.has("#! root") && os.Geteuid() != 0 {
			got = s.want // recorded as root; another user gets EACCES
		}
		if got != s.want && !*update {
			failed = true
			t.Errorf("$ %s\n--- want\n%s--- got\n%s", s.cmd, s.want, got)
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if failed {
		t.Logf("run with -update to rewrite %s", file)
	}
}

// splitArgs splits a command line: white space separates words, '…' and
// "…" quote (\" and \\ escape inside double quotes); the words $UID and
// $GID stand for the test's effective uid and gid.
func splitArgs(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated quote")
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		args = append(args, cur.String())
	}
	for i, a := range args {
		switch a {
		case "$UID":
			args[i] = itoa(int64(os.Geteuid()))
		case "$GID":
			args[i] = itoa(int64(os.Getegid()))
		}
	}
	return args, nil
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
