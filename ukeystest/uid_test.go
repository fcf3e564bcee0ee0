package ukeystest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/ukeystest"
)

func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho copied\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	ukeystest.CopyExecutable(t, src, dst)
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("copy has mode %v, not executable", fi.Mode())
	}
	if out, err := exec.Command(dst).Output(); err != nil || string(out) != "copied\n" {
		t.Errorf("running the copy: %q, %v", out, err)
	}

	// An existing file is never replaced, and a copy that fails leaves
	// nothing behind.
	if msg := fatalOf(func(tb testing.TB) { ukeystest.CopyExecutable(tb, src, dst) }); msg == "" {
		t.Error("CopyExecutable replaced an existing file")
	}
	missing := filepath.Join(dir, "missing")
	if msg := fatalOf(func(tb testing.TB) { ukeystest.CopyExecutable(tb, src+".none", missing) }); msg == "" {
		t.Error("CopyExecutable of a missing file did not fail")
	}
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		t.Errorf("a failed copy left %s behind: %v", missing, err)
	}
}

func TestAs(t *testing.T) {
	ukeystest.NeedRoot(t, "only root starts processes as other uids")
	for _, tc := range []struct {
		groups []uint32
		want   string
	}{
		{nil, "65534\n65534\n65534\n"},
		{[]uint32{4242}, "65534\n65534\n65534 4242\n"},
	} {
		cmd := exec.Command("/bin/sh", "-c", "id -u; id -g; id -G")
		cmd.SysProcAttr = ukeystest.As(65534, 65534, tc.groups...)
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != tc.want {
			t.Errorf("As(65534, 65534, %v): id printed %q, %v; want %q", tc.groups, out, err, tc.want)
		}
	}
}

// fatalOf runs f with a testing.TB whose Fatal and Fatalf end f (as they
// end a test) and returns what it said, "" if f did not fail.
func fatalOf(f func(testing.TB)) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	return tb.msg
}

type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fatalTB) Fatal(args ...any) {
	f.msg = strings.TrimSuffix(fmt.Sprintln(args...), "\n")
	runtime.Goexit()
}
