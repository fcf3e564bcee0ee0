package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/ukeystest"
)

// The shell blocks of README.md and of the pages under docs/ are part of
// the suite, so that the documentation cannot drift from what the code
// does. Every ```sh block of those files carries a marker on the line
// before it:
//
//	<!-- readme: run -->             run by TestREADME, in order
//	<!-- readme: run needs=keyctl -->  the same, where keyutils' keyctl is installed
//	<!-- readme: daemon -->          README's Run block: run first, in the background, in one of TestREADME's two runs
//	<!-- readme: not run: WHY -->    not run here, and why
//
// and a block that is run is followed, before the next shell block, by
// its output in a ```text block marked <!-- readme: output -->. The blocks
// run in one shell: README's first, then each page's in the order of the
// pages' names, so that a page may build on what README's first use made.

// readmeBlock is one shell block of README or of a page under docs/.
type readmeBlock struct {
	file   string   // the file it is in, relative to the repository's root
	line   int      // where it starts, for messages
	marker string   // what follows "readme: "
	cmds   []string // its lines
	output string   // what it prints, as README shows it
	hasOut bool
}

var readmeMarker = regexp.MustCompile(`^<!-- readme: (.*) -->$`)

// parseReadme returns the shell blocks of file, whose text is text, and
// fails the test for a block without a marker or a run block without its
// output.
func parseReadme(t *testing.T, file, text string) []*readmeBlock {
	t.Helper()
	lines := strings.Split(text, "\n")
	var blocks []*readmeBlock
	var last *readmeBlock
	marker := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := readmeMarker.FindStringSubmatch(l); m != nil {
			marker = m[1]
			continue
		}
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(marker, "output") {
				marker = ""
			}
			continue
		}
		info := strings.TrimPrefix(l, "```")
		start := i
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		switch {
		case info == "sh":
			if marker == "" {
				t.Errorf("%s:%d: a shell block without a <!-- readme: ... --> marker (run, or not run: why)", file, start+1)
			}
			last = &readmeBlock{file: file, line: start + 1, marker: marker, cmds: body}
			blocks = append(blocks, last)
		case marker == "output":
			if last == nil || last.hasOut {
				t.Errorf("%s:%d: an output block that follows no shell block", file, start+1)
				break
			}
			last.output, last.hasOut = strings.Join(body, "\n"), true
		}
		marker = ""
	}
	for _, b := range blocks {
		if strings.HasPrefix(b.marker, "run") && !b.hasOut {
			t.Errorf("%s:%d: a block that is run has no <!-- readme: output --> block after it", b.file, b.line)
		}
		if !strings.HasPrefix(b.marker, "run") && b.marker != "daemon" && !strings.HasPrefix(b.marker, "not run: ") {
			t.Errorf("%s:%d: unknown marker %q", b.file, b.line, b.marker)
		}
	}
	return blocks
}

// readmeUID and readmeGID are the user README's outputs show, whom the
// test plays when it runs as root.
const readmeUID, readmeGID = 1000, 1000

// TestREADME runs the shell blocks of README and of the pages under
// docs/ as a newcomer would type them:
// in one new shell (a login of its own, with no session keyring), from a
// clean build of the repository as it stands, with no UKEYS_* variable,
// and compares what each block prints with what README shows under it
// (serial numbers, pids and the runtime directory masked). It does so
// twice: with no daemon running, so that the first ukeyctl starts one;
// and after README's Run block has started one (the daemon block), where
// ukeyctl says nothing of starting one.
//
// As root, the commands run as uid 1000 (README's user), except the Go
// toolchain's (`go build`, `go run`), which run as the test's own user so
// that they use its module and build caches (the build's output is then
// handed to uid 1000); and the daemon that README's Run block starts as
// root serves on the system socket of a mount namespace of its own, so
// that the host's /run is left alone.
//
// First, and in -short mode too, it checks the files' markers and that
// every relative link among them names a file that exists (and, for a
// link into a Markdown file, a heading there).
func TestREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := readDocs(t, root)
	var blocks []*readmeBlock
	for _, f := range files {
		blocks = append(blocks, parseReadme(t, f.name, f.text)...)
	}
	checkLinks(t, root, files)
	if t.Failed() {
		return
	}
	if testing.Short() {
		t.Skip("builds the commands from scratch")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git, to copy the repository's files")
	}
	if c, err := net.DialTimeout("unix", endpoint.System(), time.Second); err == nil {
		c.Close()
		t.Skipf("a system ukeyd answers at %s: README's first steps are for a host without one", endpoint.System())
	}
	for _, b := range blocks {
		if !strings.HasPrefix(b.marker, "run") && b.marker != "daemon" {
			t.Logf("%s:%d: not run (%s)", b.file, b.line, strings.TrimPrefix(b.marker, "not run: "))
		}
	}
	t.Run("no daemon", func(t *testing.T) { readmeScenario(t, root, blocks, false) })
	t.Run("after Run", func(t *testing.T) { readmeScenario(t, root, blocks, true) })
}

// readmeScenario runs README's blocks in a new copy of the repository,
// after starting the daemon as README's Run block says if withDaemon.
func readmeScenario(t *testing.T, root string, blocks []*readmeBlock, withDaemon bool) {
	asRoot := os.Geteuid() == 0
	uid, gid := os.Getuid(), os.Getgid()
	if asRoot {
		uid, gid = readmeUID, readmeGID
	}
	var daemon []string
	for _, b := range blocks {
		if b.marker == "daemon" {
			daemon = append(daemon, b.cmds...)
		}
	}
	if withDaemon && len(daemon) != 1 {
		t.Fatalf("README and docs/ have %d daemon lines (<!-- readme: daemon -->), want one", len(daemon))
	}
	if withDaemon && asRoot {
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Skip("needs setpriv (util-linux) to run README's commands as uid 1000 after starting the daemon as root")
		}
	}

	// A directory uid may reach, holding a copy of the repository (the
	// files git knows, as a clone has them), a home and a runtime dir.
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	repo := filepath.Join(tmp, "ukeys")
	copyRepo(t, root, repo)
	home, xdg := filepath.Join(tmp, "home"), filepath.Join(tmp, "xdg")
	for _, d := range []string{home, xdg} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	// The script the shell runs: each command after a line naming it.
	var script strings.Builder
	script.WriteString("exec 2>&1\n")
	type step struct {
		block *readmeBlock
		cmd   string
	}
	var steps []step
	haveKeyctl := false
	if _, err := os.Stat("/usr/bin/keyctl"); err == nil {
		haveKeyctl = true
	}
	for _, b := range blocks {
		if !strings.HasPrefix(b.marker, "run") {
			continue
		}
		if strings.Contains(b.marker, "needs=keyctl") && !haveKeyctl {
			t.Logf("%s:%d: not run: keyutils' keyctl is not installed (apt-get install keyutils)", b.file, b.line)
			continue
		}
		for _, c := range b.cmds {
			if strings.TrimSpace(c) == "" {
				continue
			}
			if asRoot && strings.HasPrefix(c, "go ") {
				// The toolchain, as the test's user (see above).
				runAs(t, repo, c, nil, nil)
				continue
			}
			fmt.Fprintf(&script, "echo '@@ %d'\n%s\n", len(steps), c)
			steps = append(steps, step{b, c})
		}
	}
	if asRoot {
		chownTree(t, tmp, uid, gid)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "XDG_RUNTIME_DIR=" + xdg, "LC_ALL=C", "TMPDIR=" + tmp}
	var cred *syscall.SysProcAttr
	if asRoot {
		cred = ukeystest.As(uint32(uid), uint32(gid))
	}
	var out string
	daemonLog := filepath.Join(tmp, "daemon.log")
	if withDaemon {
		// The daemon as README's Run block starts it, in the background,
		// and the rest once it answers.
		sock := filepath.Join(xdg, "ukeys", "ukeyd.sock")
		if asRoot {
			sock = endpoint.System()
		}
		start := fmt.Sprintf("(%s) >%s 2>&1 &\nfor i in $(seq 600); do [ -S %s ] && break; sleep 0.1; done\n", daemon[0], daemonLog, sock)
		t.Cleanup(func() { stopDaemonOf(daemonLog) })
		if asRoot {
			use := filepath.Join(tmp, "use.sh")
			if err := os.WriteFile(use, []byte(script.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			wrapper := "mount -t tmpfs -o mode=0755 tmpfs /run || exit 1\n" + start +
				fmt.Sprintf("exec setpriv --reuid=%d --regid=%d --clear-groups /usr/bin/env -i %s setsid -w /bin/sh %s\n", uid, gid, strings.Join(env, " "), use)
			out = runAs(t, repo, wrapper, nil, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
		} else {
			out = runAs(t, repo, start+script.String(), env, cred)
		}
	} else {
		out = runAs(t, repo, script.String(), env, cred)
		// Stop the daemon that the first command started.
		if m := regexp.MustCompile(`started ukeyd \(pid (\d+)\)`).FindStringSubmatch(out); m != nil {
			pid, _ := strconv.Atoi(m[1])
			t.Cleanup(func() { stopPid(pid) })
		}
	}

	// What each block printed.
	got := map[*readmeBlock]*strings.Builder{}
	var cur *strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "@@ "); ok {
			i, _ := strconv.Atoi(n)
			b := steps[i].block
			if got[b] == nil {
				got[b] = new(strings.Builder)
			}
			cur = got[b]
			continue
		}
		if cur != nil {
			cur.WriteString(l)
		}
	}
	mask := readmeMasker(xdg, uid, gid)
	for _, b := range blocks {
		g := got[b]
		if g == nil {
			continue
		}
		want := b.output
		if withDaemon {
			// ukeyctl started nothing, and says nothing of it.
			var kept []string
			for _, l := range strings.Split(want, "\n") {
				if !strings.HasPrefix(l, "ukeyctl: ") {
					kept = append(kept, l)
				}
			}
			want = strings.Join(kept, "\n")
		}
		if mask.apply(want) != mask.apply(g.String()) {
			t.Errorf("%s:%d: the block prints\n%s\nbut the file shows\n%s\n(masked:\n%s\nagainst\n%s)", b.file, b.line, g.String(), want, mask.apply(g.String()), mask.apply(want))
		}
	}
	if t.Failed() && withDaemon {
		log, _ := os.ReadFile(daemonLog)
		t.Logf("the daemon's log:\n%s", log)
	}
}

// stopDaemonOf stops the daemon whose log is at path (it logs its pid
// when it starts listening).
func stopDaemonOf(path string) {
	b, _ := os.ReadFile(path)
	if m := regexp.MustCompile(`msg="ukeyd: listening".* pid=(\d+)`).FindSubmatch(b); m != nil {
		pid, _ := strconv.Atoi(string(m[1]))
		stopPid(pid)
	}
}

// runAs runs script with sh in dir, as a new session leader, with env
// (or the test's environment) and cred, and returns its output; it
// fails the test if the script fails.
func runAs(t *testing.T, dir, script string, env []string, cred *syscall.SysProcAttr) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	if cred == nil {
		cred = &syscall.SysProcAttr{}
	}
	cred.Setsid = true
	cmd.SysProcAttr = cred
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out.String())
		}
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s: still running after 5 minutes\n%s", script, out.String())
	}
	return out.String()
}

// copyRepo copies the files git knows of in src (tracked, or new and not
// ignored), as they are in the working tree, to dst.
func copyRepo(t *testing.T, src, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = src
	list, err := cmd.Output()
	if err != nil {
		t.Skipf("cannot list the repository's files with git: %v", err)
	}
	for _, name := range strings.Split(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		st, err := os.Lstat(from)
		if err != nil {
			continue // deleted in the working tree
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err == nil {
				err = os.Symlink(target, to)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// chownTree gives everything under dir to uid and gid.
func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stopPid stops a daemon and waits for it to go.
func stopPid(pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// readmeMask is how README's outputs and the test's are compared.
type readmeMask struct {
	xdg      string
	uid, gid int
}

func readmeMasker(xdg string, uid, gid int) readmeMask {
	return readmeMask{xdg: xdg, uid: uid, gid: gid}
}

var (
	readmePid    = regexp.MustCompile(`\(pid \d+\)`)
	readmeSerial = regexp.MustCompile(`\b\d{6,10}\b`)
	readmeSpaces = regexp.MustCompile(`[ \t]+`)
)

// apply masks what differs from run to run: the runtime directory (README
// shows /run/user/1000), the user (README's is uid 1000, gid 1000), pids,
// and serial numbers, each of which becomes K1, K2… in order of first
// appearance (so that a serial shown twice must be the same twice);
// runs of blanks count as one, since columns widen with the numbers.
func (m readmeMask) apply(s string) string {
	s = strings.ReplaceAll(s, m.xdg, "/run/user/1000")
	s = readmePid.ReplaceAllString(s, "(pid N)")
	serials := map[string]string{}
	s = readmeSerial.ReplaceAllStringFunc(s, func(n string) string {
		if serials[n] == "" {
			serials[n] = fmt.Sprintf("K%d", len(serials)+1)
		}
		return serials[n]
	})
	if m.uid != readmeUID {
		s = regexp.MustCompile(`\b`+strconv.Itoa(m.uid)+`\b`).ReplaceAllString(s, strconv.Itoa(readmeUID))
	}
	if m.gid != readmeGID {
		s = regexp.MustCompile(`\b`+strconv.Itoa(m.gid)+`\b`).ReplaceAllString(s, strconv.Itoa(readmeGID))
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.TrimSpace(readmeSpaces.ReplaceAllString(l, " ")))
	}
	return strings.Join(lines, "\n")
}

// docFile is one file TestREADME reads: README.md or a page under docs/.
type docFile struct {
	name string // relative to the repository's root, with slashes
	text string
}

// readDocs returns README.md and then docs/*.md in the order of their
// names, the order in which their blocks run.
func readDocs(t *testing.T, root string) []docFile {
	t.Helper()
	names := []string{"README.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	for _, p := range pages {
		names = append(names, "docs/"+filepath.Base(p))
	}
	var files []docFile
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(n)))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, docFile{n, string(b)})
	}
	return files
}

var (
	docLink     = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	docCodeSpan = regexp.MustCompile("`[^`]*`")
	docHeading  = regexp.MustCompile(`^#{1,6} +(.*?) *#*$`)
)

// docProse returns the lines of text outside fenced code blocks, with
// their numbers.
func docProse(text string) (lines []string, numbers []int) {
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines, numbers = append(lines, l), append(numbers, i+1)
		}
	}
	return lines, numbers
}

// docAnchors returns the anchors GitHub gives the headings of a Markdown
// text: lower case, spaces made hyphens, every other character but
// letters, digits, hyphens and underscores dropped, and -1, -2… added to
// a repeated one.
func docAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	lines, _ := docProse(text)
	for _, l := range lines {
		m := docHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// checkLinks fails the test for a relative link in files that names no
// file of the repository, or a heading its Markdown file does not have.
func checkLinks(t *testing.T, root string, files []docFile) {
	t.Helper()
	for _, f := range files {
		lines, numbers := docProse(f.text)
		for i, l := range lines {
			l = docCodeSpan.ReplaceAllString(l, "")
			for _, m := range docLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := f.name
				if file != "" {
					path = filepath.ToSlash(filepath.Join(filepath.Dir(f.name), file))
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
					t.Errorf("%s:%d: a link to %s, which is not in the repository", f.name, numbers[i], target)
					continue
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
				if err != nil {
					t.Errorf("%s:%d: %v", f.name, numbers[i], err)
					continue
				}
				if !docAnchors(string(b))[anchor] {
					t.Errorf("%s:%d: a link to %s, but %s has no heading #%s", f.name, numbers[i], target, path, anchor)
				}
			}
		}
	}
}
