package keyctl

import (
	"errors"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Masks render as keyctl describe renders them.
func TestPermString(t *testing.T) {
	for _, tc := range []struct {
		p    Perm
		want string
	}{
		{PermDefault, "alswrv-----v------------"},
		{PermLogon, "alsw-v-----v------------"},
		{PermUserKeyring, "-lswrvalswrv------------"},
		{PermMask, "alswrvalswrvalswrvalswrv"},
		{0, "------------------------"},
		{View | Read<<GroupShift | Search<<OtherShift, "----------------r---s--v"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%08x: %q, want %q", uint32(tc.p), got, tc.want)
		}
	}
}

// Every errno the service returns has the C library's text, and matches
// the system's errno of the same number on Linux only.
func TestErrno(t *testing.T) {
	for e, text := range errnoText {
		if text == "" || e.Error() != text {
			t.Errorf("errno %d: %q", e, e.Error())
		}
		if errors.Is(e, syscall.Errno(e)) != sameNumbering {
			t.Errorf("errno %d: errors.Is against syscall.Errno is %v on this system", e, !sameNumbering)
		}
	}
	if got := Errno(4000).Error(); got != "Unknown error 4000" {
		t.Errorf("unknown errno: %q", got)
	}
}

func TestNotifyKindString(t *testing.T) {
	if NotifyLinked.String() != "link" || NotifyRemoved.String() != "gc" || NotifyKind(99).String() != "unknown" {
		t.Fatal("notification kinds do not read as keyctl watch prints them")
	}
}
