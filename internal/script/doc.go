// Package script runs golden scripts: text files of commands, each
// followed by what it printed, in the manner of go.etcd.io/raft's
// data-driven tests. A test gives [Run] a file and a function that runs one
// command; Run runs every step, compares what the function returned with
// what the file says, and with -update rewrites the file instead.
//
// A script is a sequence of lines:
//
//	# a comment                 attached to the next step
//	#! directive: argument      a comment that means something to the test
//	$ add user foo 'b a r' @s   a command (split by Split into Args)
//	< a line                    a line of the command's standard input
//	<< a last line              a last line of stdin with no newline
//	1| a line                   a line of what it wrote to stdout
//	1< a last line              a last stdout line with no newline
//	2| a line                   a line of what it wrote to stderr
//	? 2                         its exit status, if not 0
//
// Blank lines are comments. A step's output is written in one order only
// (stdin, stdout, stderr, status) and is compared as text, so a file that
// parses is exactly what -update would write for the same results: [Parse]
// rejects any other arrangement, naming the line.
//
// Directives carry what the format itself does not: which steps a test
// must treat specially ("#! sort", "#! root"), or why a step may differ
// somewhere else ("#! kernel-differs: why"). The package gives them no
// meaning; a test asks a step whether it has one ([Step.Has],
// [Step.Directive]).
//
// A test that drives a command line and one that drives an API in process
// use it alike:
//
//	func TestScripts(t *testing.T) {
//		files, _ := filepath.Glob("testdata/*.script")
//		for _, f := range files {
//			t.Run(filepath.Base(f), func(t *testing.T) {
//				env := newEnv(t)
//				script.Run(t, f, func(t testing.TB, s *script.Step) script.Result {
//					return env.do(s.Args)
//				})
//			})
//		}
//	}
//
// Whatever must be masked before comparing (serial numbers, user ids) the
// function masks in the [Result] it returns. A step whose recorded output
// is not to be checked (it holds for root only, say) returns s.Want, and
// -update keeps it as it is.
package script
