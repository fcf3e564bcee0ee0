package ukeystest

import (
	"io"
	"os"
	"syscall"
	"testing"
)

// NeedRoot skips the test unless it runs as root, saying why it needs
// to: only root can start processes as other uids (see [As]) or make files
// that belong to them.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}

// As returns the attributes (an exec.Cmd's SysProcAttr) that start a
// process as uid and gid with exactly the supplementary groups given,
// none if none are: a child of a root test would otherwise keep root's
// groups, and a test of permissions would pass for the wrong reason.
// Starting one takes root ([NeedRoot]).
func As(uid, gid uint32, groups ...uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
}

// CopyExecutable copies the executable src to dst, a new file of mode
// 0755, and fails the test if it cannot (leaving no partial copy
// behind). It refuses to replace an existing dst, which in a directory
// other users can write may be theirs.
//
// Tests that run their own test binary ([os.Executable]) as another uid
// need a copy in a directory that uid can reach, since the go command
// builds it in a directory private to the user running the tests; and a
// copy, not a link, is what a program that looks for its companions
// beside its own executable finds itself to be.
func CopyExecutable(t testing.TB, src, dst string) {
	t.Helper()
	if err := copyExecutable(src, dst); err != nil {
		t.Fatalf("ukeystest: copying %s: %v", src, err)
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}
