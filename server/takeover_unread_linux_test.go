package server

import (
	"bytes"
	"log/slog"
	"os"
	"testing"

	"github.com/ukeys/ukeys/keys"
	"golang.org/x/sys/unix"
)

// TestRestoreWipesUnreadNotResumed: a connection handed over with bytes
// its old daemon read and did not serve (a request in flight, payload
// and all) whose process the new daemon cannot match to it is closed,
// and its bytes are wiped rather than left to the collector.
func TestRestoreWipesUnreadNotResumed(t *testing.T) {
	old := keys.New()
	var state bytes.Buffer
	if err := old.Export(&state); err != nil {
		t.Fatal(err)
	}
	old.Close()
	rs, err := keys.Import(&state)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Service().Close()
	s := New(rs.Service(), Config{Logger: slog.New(slog.DiscardHandler)})
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	unread := []byte("a request in flight, with its secret payload")
	rec := &handoverRecords{Version: HandoverVersion, Conns: []connRecord{
		// The record names a process other than the socket's peer (this
		// one): the connection does not resume.
		{FD: 0, PID: os.Getpid() + 1, Unread: unread},
	}}
	start, err := s.restore(rs, rec, []int{fds[0]}, &TakeoverResult{Service: rs.Service()})
	if err != nil {
		t.Fatal(err)
	}
	rs.Done()
	start(true)
	defer s.Shutdown(t.Context())
	if i := bytes.IndexFunc(unread, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("the unread bytes of a connection that did not resume still hold %q", unread[i:])
	}
	if n, _ := unix.Read(fds[1], make([]byte, 1)); n != 0 {
		t.Errorf("the connection that did not resume is open (read %d)", n)
	}
}
