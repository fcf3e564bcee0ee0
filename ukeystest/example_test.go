package ukeystest_test

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
)

// In a test, pass the test's t; the Example stands in for one with
// exampleTB, which runs the cleanups when it is done.
func ExampleNewDaemon() {
	t := &exampleTB{}
	defer t.done()

	d := ukeystest.NewDaemon(t)
	c := d.Dial(t)
	id, err := c.AddKey("user", "greeting", []byte("hello"), keys.SessionKeyring)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s\n", b)
	// Output: hello
}

// A test that runs a process as another user gives it exactly the
// credentials it names, no supplementary groups of root's among them.
func ExampleAs() {
	cmd := exec.Command("id", "-u")
	cmd.SysProcAttr = ukeystest.As(1000, 100)
	cr := cmd.SysProcAttr.Credential
	fmt.Println(cr.Uid, cr.Gid, len(cr.Groups))
	// Output: 1000 100 0
}

// exampleTB is the little of testing.TB that NewDaemon and Dial use.
type exampleTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
}

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatal(args ...any)              { log.Fatal(args...) }
func (e *exampleTB) Errorf(format string, a ...any) { log.Printf(format, a...) }
func (e *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "ukeystest-example-")
	if err != nil {
		log.Fatal(err)
	}
	e.dirs = append(e.dirs, dir)
	return dir
}

func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	for _, dir := range e.dirs {
		os.RemoveAll(dir)
	}
}
