package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// A uid at its bound of client processes is refused before the daemon
// reads a new process's ancestry in /proc: up to 64 reads in the accept
// loop, which every other uid's connection waits behind. Before, each
// refused process was walked first, so that one uid connecting and
// hanging up in a loop from deep in a process tree held the accept loop
// for seconds (an audit measured other uids' connections waiting 10 s).
func TestRefusedBeforeTheAncestryIsRead(t *testing.T) {
	var mu sync.Mutex
	walked := map[int]bool{}
	testHookInheritance = func(pid int) {
		mu.Lock()
		walked[pid] = true
		mu.Unlock()
	}
	t.Cleanup(func() { testHookInheritance = nil })
	var logged syncBuffer
	_, path := serveTemp(t, Config{Limits: Limits{MaxProcsPerUID: 1}, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	c := dialRaw(t, path) // the test process: the uid's one process
	defer c.Close()
	// Another process of the same uid: over the bound.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=connect", "UKEYS_SOCKET="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	// Its connection is refused (a connection more of the test process,
	// served, shows the refusal has been made: accept is one loop).
	dialRaw(t, path).Close()
	if want := fmt.Sprintf("pid=%d reason=\"too many client processes\"", cmd.Process.Pid); !strings.Contains(logged.String(), want) {
		t.Fatalf("the process over the bound was not refused (%s):\n%s", want, logged.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if walked[cmd.Process.Pid] {
		t.Fatalf("the ancestry of process %d was read before it was refused", cmd.Process.Pid)
	}
}

// syncBuffer is a bytes.Buffer for a logger that writes from the
// daemon's goroutines while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
