package script_test

import (
	"fmt"
	"strings"

	"github.com/ukeys/ukeys/internal/script"
)

// A test runs a script with script.Run; this shows what Run does with
// each step: it runs the command (here, a toy echo), and compares the
// Result with the step's Want, or under -update records it.
func Example() {
	f, err := script.Parse(`# echo prints its arguments
$ echo hello 'big world'
1| (not run yet)
#! fails
$ echo
`)
	if err != nil {
		panic(err)
	}
	for _, s := range f.Steps {
		got := script.Result{Stdout: strings.Join(s.Args[1:], " ") + "\n"}
		if s.Has("fails") {
			got = script.Result{Stderr: "echo: nothing to say\n", Code: 2}
		}
		fmt.Printf("%s: same as recorded: %v\n", s.Args[0], got.String() == s.Want.String())
		s.Want = got
	}
	fmt.Print(f)
	// Output:
	// echo: same as recorded: false
	// echo: same as recorded: false
	// # echo prints its arguments
	// $ echo hello 'big world'
	// 1| hello big world
	// #! fails
	// $ echo
	// 2| echo: nothing to say
	// ? 2
}
