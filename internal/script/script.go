package script

import (
	"fmt"
	"strconv"
	"strings"
)

// File is a parsed script.
type File struct {
	Steps []*Step
	// Trailer holds the comment lines after the last step.
	Trailer []string
}

// Step is one command of a script with what the script says it printed.
type Step struct {
	// Line is the line number of the command in its file, from 1.
	Line int
	// Comments are the comment and blank lines before the command,
	// directives among them, as written.
	Comments []string
	// Directives are the comments of the form "#! directive", without
	// the "#! ".
	Directives []string
	// Cmd is the command line as written; Args is Cmd split by Split.
	Cmd  string
	Args []string
	// Stdin is the command's standard input.
	Stdin string
	// Want is what the command did when the script was recorded.
	Want Result
}

// Has reports whether the step has the directive name, alone or with an
// argument ("#! name" or "#! name: argument").
func (s *Step) Has(name string) bool {
	_, ok := s.Directive(name)
	return ok
}

// Directive returns the argument of the step's directive name ("" if it
// has none) and whether the step has it.
func (s *Step) Directive(name string) (arg string, ok bool) {
	for _, d := range s.Directives {
		if d == name {
			return "", true
		}
		if arg, ok := strings.CutPrefix(d, name+":"); ok {
			return strings.TrimSpace(arg), true
		}
	}
	return "", false
}

// Result is what a command did.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// String renders r as a script records it: stdout lines, stderr lines,
// then the exit status if it is not 0. A stderr that does not end in a
// newline is shown as if it did.
func (r Result) String() string {
	var b strings.Builder
	for out := r.Stdout; out != ""; {
		line, rest, nl := strings.Cut(out, "\n")
		if nl {
			b.WriteString("1| " + line + "\n")
		} else {
			b.WriteString("1< " + line + "\n")
		}
		out = rest
	}
	for _, line := range strings.SplitAfter(r.Stderr, "\n") {
		if line != "" {
			b.WriteString("2| " + strings.TrimSuffix(line, "\n") + "\n")
		}
	}
	if r.Code != 0 {
		fmt.Fprintf(&b, "? %d\n", r.Code)
	}
	return b.String()
}

// String renders the step as its script records it: comments, command,
// stdin and Want.
func (s *Step) String() string {
	var b strings.Builder
	for _, c := range s.Comments {
		b.WriteString(c + "\n")
	}
	b.WriteString("$ " + s.Cmd + "\n")
	for _, line := range strings.SplitAfter(s.Stdin, "\n") {
		switch {
		case line == "":
		case strings.HasSuffix(line, "\n"):
			b.WriteString("< " + line)
		default:
			b.WriteString("<< " + line + "\n")
		}
	}
	b.WriteString(s.Want.String())
	return b.String()
}

// String renders the whole script; for a parsed [File] it is the text
// parsed.
func (f *File) String() string {
	var b strings.Builder
	for _, s := range f.Steps {
		b.WriteString(s.String())
	}
	for _, c := range f.Trailer {
		b.WriteString(c + "\n")
	}
	return b.String()
}

// Error is a line of a script that [Parse] cannot accept.
type Error struct {
	Line int // from 1
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Parse parses a script. It accepts only text in the form String writes
// (see the package documentation) and reports the first line that is
// not, as an *[Error].
func Parse(text string) (*File, error) {
	f := &File{}
	var cur *Step
	var pending []string
	var raw strings.Builder // cur's text as written, to check its form
	finish := func() error {
		if cur == nil {
			return nil
		}
		if got := cur.String(); got != raw.String() {
			return &Error{cur.Line, fmt.Sprintf("step %q is not written as it would be recorded:\n%s", cur.Cmd, got)}
		}
		return nil
	}
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n := i + 1
		if strings.HasPrefix(line, "#") || line == "" {
			pending = append(pending, line)
			continue
		}
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			if err := finish(); err != nil {
				return nil, err
			}
			args, err := Split(cmd)
			if err != nil {
				return nil, &Error{n, err.Error()}
			}
			if len(args) == 0 {
				return nil, &Error{n, "empty command"}
			}
			cur = &Step{Line: n, Comments: pending, Cmd: cmd, Args: args}
			for _, c := range pending {
				if d, ok := strings.CutPrefix(c, "#! "); ok {
					cur.Directives = append(cur.Directives, d)
				}
			}
			f.Steps = append(f.Steps, cur)
			raw.Reset()
			for _, c := range pending {
				raw.WriteString(c + "\n")
			}
			raw.WriteString(line + "\n")
			pending = nil
			continue
		}
		if cur == nil {
			return nil, &Error{n, fmt.Sprintf("%q before any command", line)}
		}
		if len(pending) > 0 {
			return nil, &Error{n, fmt.Sprintf("%q after a comment: a comment belongs to the next command", line)}
		}
		raw.WriteString(line + "\n")
		w := &cur.Want
		switch {
		case strings.HasPrefix(line, "< "):
			cur.Stdin += line[2:] + "\n"
		case strings.HasPrefix(line, "<< "):
			cur.Stdin += line[3:]
		case strings.HasPrefix(line, "1| "):
			w.Stdout += line[3:] + "\n"
		case strings.HasPrefix(line, "1< "):
			w.Stdout += line[3:]
		case strings.HasPrefix(line, "2| "):
			w.Stderr += line[3:] + "\n"
		case strings.HasPrefix(line, "? "):
			code, err := strconv.Atoi(line[2:])
			if err != nil {
				return nil, &Error{n, fmt.Sprintf("bad exit status %q", line[2:])}
			}
			w.Code = code
		default:
			return nil, &Error{n, fmt.Sprintf("%q is neither a command, its input or output, nor a comment", line)}
		}
	}
	if err := finish(); err != nil {
		return nil, err
	}
	f.Trailer = pending
	return f, nil
}
