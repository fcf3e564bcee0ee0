package script

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

const sample = `#! compare
# Two steps and a trailer.
$ add user foo 'b a r' @s
< in
<< put
1| 123
1< no newline
2| an error
? 1

#! kernel-differs: it may
#! sort
$ list "a \"q\"" ''
1| 
2| 
# the end
`

func TestParse(t *testing.T) {
	f, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	want := []*Step{{
		Line:       3,
		Comments:   []string{"#! compare", "# Two steps and a trailer."},
		Directives: []string{"compare"},
		Cmd:        "add user foo 'b a r' @s",
		Args:       []string{"add", "user", "foo", "b a r", "@s"},
		Stdin:      "in\nput",
		Want:       Result{Stdout: "123\nno newline", Stderr: "an error\n", Code: 1},
	}, {
		Line:       13,
		Comments:   []string{"", "#! kernel-differs: it may", "#! sort"},
		Directives: []string{"kernel-differs: it may", "sort"},
		Cmd:        `list "a \"q\"" ''`,
		Args:       []string{"list", `a "q"`, ""},
		Want:       Result{Stdout: "\n", Stderr: "\n"},
	}}
	if len(f.Steps) != len(want) {
		t.Fatalf("%d steps, want %d", len(f.Steps), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(f.Steps[i], want[i]) {
			t.Errorf("step %d:\n%#v\nwant\n%#v", i, *f.Steps[i], *want[i])
		}
	}
	if !reflect.DeepEqual(f.Trailer, []string{"# the end"}) {
		t.Errorf("trailer %q", f.Trailer)
	}
	if got := f.String(); got != sample {
		t.Errorf("String:\n%s\nwant the text parsed:\n%s", got, sample)
	}
}

func TestDirectives(t *testing.T) {
	s := &Step{Directives: []string{"sort", "kernel-differs: it may", "rooted"}}
	for _, tc := range []struct {
		name string
		arg  string
		ok   bool
	}{
		{"sort", "", true},
		{"kernel-differs", "it may", true},
		{"root", "", false}, // a prefix of another directive's name is not it
		{"kernel", "", false},
		{"compare", "", false},
	} {
		arg, ok := s.Directive(tc.name)
		if arg != tc.arg || ok != tc.ok || s.Has(tc.name) != tc.ok {
			t.Errorf("Directive(%q) = %q, %v; want %q, %v", tc.name, arg, ok, tc.arg, tc.ok)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		text string
		line int
	}{
		{"1| out\n", 1},                    // output before any command
		{"# c\n$ x\nbogus\n", 3},           // not a line of the format
		{"$ x\n  \n", 2},                   // blanks are not a blank line
		{"$ x 'open\n", 1},                 // unterminated quote
		{"$  \n", 1},                       // no command
		{"$ x\n# c\n1| late\n", 3},         // output after a comment
		{"$ x\n? one\n", 2},                // status not a number
		{"$ x\n? 0\n", 1},                  // status 0 is not written
		{"$ x\n2| e\n1| o\n", 1},           // stderr before stdout
		{"$ x\n1< a\n1| b\n", 1},           // a last line that is not last
		{"$ x\n1| a\n< in\n", 1},           // stdin after output
		{"$ x\n<< a\n< b\n", 1},            // a last stdin line that is not last
		{"$ a\n1| ok\n$ b\n? 1\n? 2\n", 3}, // two statuses
		{"$ x\n1< \n", 1},                  // an empty last line is no line
		{"$ x\n2|missing space\n", 2},      // not a line of the format
		{"#! compare\n$ ok\n$ x\n1|\n", 4}, // "1|" without its space
		{"$ ok\n1| fine\n$ x\n? +1\n", 3},  // status not as written
	} {
		_, err := Parse(tc.text)
		var e *Error
		if !errors.As(err, &e) || e.Line != tc.line {
			t.Errorf("Parse(%q) = %v, want an error at line %d", tc.text, err, tc.line)
		}
	}
}

func TestResultString(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		want string
	}{
		{Result{}, ""},
		{Result{Stdout: "a\nb\n"}, "1| a\n1| b\n"},
		{Result{Stdout: "a\nb"}, "1| a\n1< b\n"},
		{Result{Stderr: "e"}, "2| e\n"}, // shown as if it ended in a newline
		{Result{Stdout: "o\n", Stderr: "e\n\n", Code: 2}, "1| o\n2| e\n2| \n? 2\n"},
		{Result{Code: -1}, "? -1\n"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v renders as %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" \t ", nil},
		{"a  b\tc", []string{"a", "b", "c"}},
		{"'a b' c", []string{"a b", "c"}},
		{`"a \"b\" \\ c"`, []string{`a "b" \ c`}},
		{`'it''s' "x"y'z'`, []string{"its", "xyz"}},
		{`'' ""`, []string{"", ""}},
		{`'\n'`, []string{`\n`}},
		{`"\n"`, []string{"n"}},
	} {
		got, err := Split(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`'a`, `"a`, `"a\"`, `a 'b c`} {
		if got, err := Split(bad); err == nil {
			t.Errorf("Split(%q) = %q, want an error", bad, got)
		}
	}
}

// fakeTB records what Run reports. Its Fatal ends the goroutine, as a
// test's does.
type fakeTB struct {
	testing.TB
	errs, logs []string
	fatal      string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Errorf(format string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(format, a...)) }
func (f *fakeTB) Logf(format string, a ...any)   { f.logs = append(f.logs, fmt.Sprintf(format, a...)) }
func (f *fakeTB) Fatal(a ...any)                 { f.fatal = fmt.Sprint(a...); runtime.Goexit() }
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}
func (f *fakeTB) run(file string, do Func) *fakeTB { return f.runIn(func() { Run(f, file, do) }) }

func (f *fakeTB) runIn(body func()) *fakeTB {
	done := make(chan struct{})
	go func() { defer close(done); body() }()
	<-done
	return f
}

// echo runs a step as echo would, and "fail" as a command that fails.
func echo(t testing.TB, s *Step) Result {
	if s.Args[0] == "fail" {
		return Result{Stderr: "failed\n", Code: 1}
	}
	return Result{Stdout: strings.Join(s.Args[1:], " ") + "\n"}
}

func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.script")
	const good = "# greet\n$ echo hello  'big world'\n1| hello big world\n$ fail\n2| failed\n? 1\n"
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	var seen []string
	f := (&fakeTB{}).run(file, func(t testing.TB, s *Step) Result {
		seen = append(seen, s.Cmd)
		return echo(t, s)
	})
	if len(f.errs)+len(f.logs) > 0 || f.fatal != "" || len(seen) != 2 {
		t.Errorf("a passing script: ran %q, errors %q, logs %q, fatal %q", seen, f.errs, f.logs, f.fatal)
	}

	// A step that differs is reported with its line and both outputs,
	// and the steps after it still run.
	bad := strings.Replace(good, "1| hello big world", "1| hello world", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	seen = nil
	f = (&fakeTB{}).run(file, func(t testing.TB, s *Step) Result {
		seen = append(seen, s.Cmd)
		return echo(t, s)
	})
	want := file + ":2:\n$ echo hello  'big world'\n--- want\n1| hello world\n--- got\n1| hello big world\n"
	if len(f.errs) != 1 || f.errs[0] != want || len(seen) != 2 || len(f.logs) != 1 {
		t.Errorf("a failing script: ran %q, errors %q, logs %q; want the error %q", seen, f.errs, f.logs, want)
	}

	// A file that does not parse is fatal, naming file and line.
	if err := os.WriteFile(file, []byte("$ echo\nbogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f = (&fakeTB{}).run(file, echo)
	if !strings.HasPrefix(f.fatal, file+":line 2: ") {
		t.Errorf("an unparsable script: fatal %q", f.fatal)
	}
}

func TestRunUpdate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.script")
	const old = "# greet\n#! keep\n$ echo a\n1| b\n$ echo kept\n1| as recorded\n$ fail\n< in\n# done\n"
	if err := os.WriteFile(file, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	*update = true
	defer func() { *update = false }()
	f := (&fakeTB{}).run(file, func(t testing.TB, s *Step) Result {
		if len(s.Args) > 1 && s.Args[1] == "kept" {
			return s.Want // a step the test does not check keeps its record
		}
		return echo(t, s)
	})
	if len(f.errs) > 0 || f.fatal != "" {
		t.Fatalf("update: errors %q, fatal %q", f.errs, f.fatal)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const want = "# greet\n#! keep\n$ echo a\n1| a\n$ echo kept\n1| as recorded\n$ fail\n< in\n2| failed\n? 1\n# done\n"
	if string(got) != want {
		t.Errorf("rewritten:\n%s\nwant\n%s", got, want)
	}
}
