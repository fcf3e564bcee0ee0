package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// childRead runs in a child process: it reads key UKEYS_TEST_KEY.
func childRead() {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	defer c.Close()
	id, _ := strconv.Atoi(os.Getenv("UKEYS_TEST_KEY"))
	b, err := c.Read(keys.Serial(id))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("read %s\n", b)
}

// Two real uids share one daemon: the daemon learns the second from the
// socket, and the key's permissions decide.
func TestTwoRealUIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another uid")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "ukeys-uid-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The child must be able to execute a copy of this test binary.
	bin := filepath.Join(dir, "child.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	svc := keys.New()
	defer svc.Close()
	srv := server.New(svc, server.Config{})
	sock := filepath.Join(dir, "run", "ukeyd.sock")
	ln, err := server.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; !errors.Is(err, server.ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	id, err := root.AddKey("user", "root-secret", []byte("only-root"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = []string{"UKEYS_TEST_CHILD=read", "UKEYS_SOCKET=" + sock, "UKEYS_TEST_KEY=" + fmt.Sprint(id)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as uid %d: %v\n%s", nobody, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := read(); !strings.Contains(got, "Permission denied") {
		t.Fatalf("uid %d reading root's key: %q, want EACCES", nobody, got)
	}
	// Grant other read (and the view that lookups need).
	if err := root.SetPerm(id, keys.PossAll|keys.UserAll|keys.View|keys.Read); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "read only-root" {
		t.Fatalf("uid %d after setperm: %q", nobody, got)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
