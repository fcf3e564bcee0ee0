package server_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// childSession runs in a child process and does what `ukeyctl session`
// does: start a session, put a key in it, close its connection, and only
// then start a child that joins the session through the token. It stays
// alive until its standard input closes.
func childSession() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	if _, err := c.JoinSessionKeyring(nil); err != nil {
		fmt.Println("join:", err)
		os.Exit(1)
	}
	id, err := c.AddKey("user", "shared", []byte("s"), keys.SessionKeyring)
	if err != nil {
		fmt.Println("add:", err)
		os.Exit(1)
	}
	tok, err := c.SessionToken()
	if err != nil {
		fmt.Println("token:", err)
		os.Exit(1)
	}
	c.Close()
	fmt.Println("id", id)
	fmt.Println("token", tok)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=search", client.SessionEnv+"="+tok)
	out, _ := cmd.CombinedOutput()
	fmt.Println("child", strings.TrimSpace(string(out)))
	io.Copy(io.Discard, os.Stdin)
}

// holder is a child process running childSession: the session's creator.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	id    int
	tok   string
	read  func(prefix string) string
}

// startHolder starts a session holder on the daemon sock names and reads
// its key's serial and its session token.
func startHolder(t *testing.T, sock string) *holder {
	t.Helper()
	h := &holder{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	h.cmd.Env = append(os.Environ(), "UKEYS_TEST_CHILD=session", sock)
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.stdin.Close()
		h.cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	h.read = func(prefix string) string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("session holder ended before %q: %v", prefix, lines.Err())
		}
		v, ok := strings.CutPrefix(lines.Text(), prefix+" ")
		if !ok {
			t.Fatalf("session holder said %q, want %q…", lines.Text(), prefix)
		}
		return v
	}
	if h.id, err = strconv.Atoi(h.read("id")); err != nil {
		t.Fatal(err)
	}
	h.tok = h.read("token")
	return h
}

// A session keyring lives as long as a process that joined it: its
// creator's connection may close, and children that connect later still
// find it through the token; once every process in it has exited, the
// session is gone and the token opens nothing.
func TestSessionOutlivesConnection(t *testing.T) {
	// The status connection waits, silent, while the holder and its
	// children run, which on a loaded machine outlasts the tests' usual
	// 5 s read timeout: the daemon would close it for its silence.
	d := startDaemonCfg(t, server.Config{ProcessPoll: 10 * time.Millisecond, ReadTimeout: 5 * time.Minute})
	sock := "UKEYS_SOCKET=" + d.path
	// This test's own process, and the anchor of its login (login.go).
	status := d.dial(t)
	st, err := status.Status()
	if err != nil {
		t.Fatal(err)
	}
	_, ours, _ := strings.Cut(st, "processes: ")
	ours, _, _ = strings.Cut(ours, "\n")
	h := startHolder(t, sock)
	id, tok, read, stdin, holder := h.id, h.tok, h.read, h.stdin, h.cmd
	if got := read("child"); got != fmt.Sprint("found ", id) {
		t.Fatalf("the session's child, connecting after its parent's connection closed: %q, want found %d", got, id)
	}
	if got := runChild(t, sock, client.SessionEnv+"="+tok); got != fmt.Sprint("found ", id) {
		t.Fatalf("another process with the token while the session's creator lives: %q", got)
	}

	// The creator exits: no process holds the session any more.
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatalf("session holder: %v", err)
	}
	var last string
	var lastErr error
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := status.Status()
		if err == nil && strings.Contains(st, "processes: "+ours+"\n") {
			break
		}
		last, lastErr = st, err
		if time.Now().After(deadline) {
			t.Fatalf("the daemon still counts processes other than this test's own (%s); its status (%v):\n%s", ours, lastErr, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its token now names nothing: a process presenting it has lost its
	// session (a revoked keyring), rather than getting a fresh one.
	if got := runChild(t, sock, client.SessionEnv+"="+tok); !strings.Contains(got, "Key has been revoked") {
		t.Fatalf("a process presenting the token of an ended session: %q, want EKEYREVOKED", got)
	}
}

// The keyrings of a process that keeps running after closing its
// connection are still there when it connects again.
func TestProcessKeyringOutlivesConnection(t *testing.T) {
	d := startDaemon(t)
	a, err := client.Dial(d.path)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := a.GetKeyringID(keys.ProcessKeyring, true)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := d.dial(t)
	if got, err := b.GetKeyringID(keys.ProcessKeyring, false); err != nil || got != pk {
		t.Fatalf("process keyring after reconnecting: %d, %v; want %d", got, err, pk)
	}
}
