package server

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ukeys/ukeys/internal/process"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/wire"
)

// startSleeper starts `sleep 600` in a process group of its own and kills
// the group at the end of the test.
func startSleeper(t *testing.T, script string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

// The ancestry check that binds a helper token to the helper's process
// tree: the helper, its child and its grandchild are in it; its parent,
// an unrelated process, pid 0 and a process that has exited (whose pid
// could be reused) are not.
func TestInProcessTree(t *testing.T) {
	if !procTreeTestable() {
		t.Skip("needs /proc (Linux) or the kern.proc sysctl (macOS)")
	}
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("needs sleep(1)")
	}
	// A helper-like process with a child and, through a second shell, a
	// grandchild; each line names one of them.
	const script = `sleep 600 & echo child $!
sh -c 'sleep 600 & echo grandchild $!; wait' & echo inner $!
wait`
	root, out := startSleeper(t, script)
	pids := map[string]int{}
	for len(pids) < 3 {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("helper-like process: %v (got %v)", err, pids)
		}
		name, n, _ := strings.Cut(strings.TrimSpace(line), " ")
		pids[name], _ = strconv.Atoi(n)
	}
	unrelated, _ := startSleeper(t, "exec sleep 600")
	helper := root.Process.Pid
	for _, c := range []struct {
		name string
		pid  int
		want bool
	}{
		{"the helper itself", helper, true},
		{"its child", pids["child"], true},
		{"its child shell", pids["inner"], true},
		{"its grandchild", pids["grandchild"], true},
		{"its parent", os.Getpid(), false},
		{"an unrelated process", unrelated.Process.Pid, false},
		{"init", 1, false},
	} {
		if got := inProcessTree(c.pid, pidHandle(t, c.pid), helper); got != c.want {
			t.Errorf("%s (pid %d): in the helper's tree %v, want %v", c.name, c.pid, got, c.want)
		}
	}
	if inProcessTree(0, &process.Handle{}, helper) {
		t.Error("pid 0 (a pid namespace the daemon cannot see) accepted")
	}
	// A connection's process that has exited: its pid still reads as the
	// helper's child (a zombie until the shell reaps it), but the pid may
	// name another process by now, so it is refused.
	child := pids["child"]
	h := pidHandle(t, child)
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the child to exit", h.Exited)
	if inProcessTree(child, h, helper) {
		t.Error("a process that has exited accepted by its pid")
	}
}

// upcallFor starts a construction whose upcall waits until the test
// ends, and returns it.
func upcallFor(t *testing.T, desc string) (*keys.Service, *keys.Caller, *keys.Upcall) {
	t.Helper()
	ups := make(chan *keys.Upcall, 1)
	stop := make(chan struct{})
	svc := keys.New(keys.WithUpcall(keys.UpcallFunc(func(ctx context.Context, u *keys.Upcall) error {
		ups <- u
		select {
		case <-stop:
		case <-ctx.Done():
		}
		return nil
	})))
	requestor := svc.NewCaller(keys.Cred{UID: 1000, GID: 100, PID: 1})
	done := make(chan error, 1)
	go func() {
		_, err := requestor.RequestKey("user", desc, []byte("info"), 0)
		done <- err
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		requestor.Release()
		svc.Close()
	})
	return svc, requestor, <-ups
}

// What a helper connection may do: the rights of request_key_auth and
// nothing else, and nothing at all once the authority is used up.
func TestHelperGrantRights(t *testing.T) {
	svc, requestor, u := upcallFor(t, "wanted")
	s := New(svc, Config{})
	token, g := s.addHelper(u)
	defer s.dropHelper(token, g)
	g.started(os.Getpid())

	secret, err := requestor.AddKey("user", "secret", []byte("s"), keys.UserKeyring)
	if err != nil {
		t.Fatal(err)
	}
	userRing, err := requestor.GetKeyringID(keys.UserKeyring, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.enter(); err != nil {
		t.Fatalf("enter a live grant: %v", err)
	}
	if _, err := g.caller.AssumeAuthority(u.Key); err != nil {
		t.Fatal(err)
	}
	req := func(op wire.Op, ints []int64, bufs ...[]byte) *wire.Request {
		return &wire.Request{Op: op, Ints: ints, Bufs: bufs}
	}
	id := func(k keys.Serial) int64 { return int64(k) }
	for _, c := range []struct {
		name string
		r    *wire.Request
		ok   bool
	}{
		{"capabilities", req(wire.OpCapabilities, nil), true},
		{"assume its authority", req(wire.OpAssumeAuthority, []int64{id(u.Key)}), true},
		{"drop its authority", req(wire.OpAssumeAuthority, []int64{0}), true},
		{"assume another", req(wire.OpAssumeAuthority, []int64{id(secret)}), false},
		{"instantiate", req(wire.OpInstantiate, []int64{id(u.Key), id(userRing)}, []byte("x")), true},
		{"negate", req(wire.OpNegate, []int64{id(u.Key), 1, 0}), true},
		{"reject", req(wire.OpReject, []int64{id(u.Key), 1, int64(keys.EKEYREJECTED), 0}), true},
		{"describe the key", req(wire.OpDescribe, []int64{id(u.Key)}), true},
		{"describe the authorisation", req(wire.OpDescribe, []int64{id(keys.ReqKeyAuthKey)}), true},
		{"describe another key", req(wire.OpDescribe, []int64{id(secret)}), false},
		{"set the key's timeout", req(wire.OpSetTimeout, []int64{id(u.Key), 10}), true},
		{"set another's timeout", req(wire.OpSetTimeout, []int64{id(secret), 10}), false},
		{"read the callout", req(wire.OpRead, []int64{id(keys.ReqKeyAuthKey)}), true},
		{"read the callout by serial", req(wire.OpRead, []int64{id(u.AuthKey)}), true},
		{"read a key found through the requestor", req(wire.OpRead, []int64{id(secret)}), true},
		{"list the requestor's user keyring", req(wire.OpRead, []int64{id(userRing)}), false},
		{"list @u", req(wire.OpRead, []int64{id(keys.UserKeyring)}), false},
		{"search", req(wire.OpSearch, []int64{id(userRing), 0}, []byte("user"), []byte("secret")), true},
		{"search and link", req(wire.OpSearch, []int64{id(userRing), id(userRing)}, []byte("user"), []byte("secret")), false},
		{"request_key without callout", req(wire.OpRequestKey, []int64{0}, []byte("user"), []byte("secret"), nil), true},
		{"request_key with callout", req(wire.OpRequestKey, []int64{0}, []byte("user"), []byte("other"), []byte("x")), false},
		{"request_key into a keyring", req(wire.OpRequestKey, []int64{id(userRing)}, []byte("user"), []byte("secret"), nil), false},
		{"get @s", req(wire.OpGetKeyringID, []int64{id(keys.SessionKeyring), 1}), true},
		{"get @u", req(wire.OpGetKeyringID, []int64{id(keys.UserKeyring), 0}), true},
		{"create @t", req(wire.OpGetKeyringID, []int64{id(keys.ThreadKeyring), 1}), false},
		{"get a key by serial", req(wire.OpGetKeyringID, []int64{id(secret), 0}), false},
		{"setperm", req(wire.OpSetPerm, []int64{id(secret), 0x3f3f3f3f}), false},
		{"chown", req(wire.OpChown, []int64{id(secret), 0, -1}), false},
		{"link", req(wire.OpLink, []int64{id(secret), id(keys.SessionKeyring)}), false},
		{"unlink", req(wire.OpUnlink, []int64{id(secret), id(userRing)}), false},
		{"move", req(wire.OpMove, []int64{id(secret), id(userRing), id(keys.SessionKeyring), 0}), false},
		{"clear", req(wire.OpClear, []int64{id(userRing)}), false},
		{"revoke", req(wire.OpRevoke, []int64{id(secret)}), false},
		{"invalidate", req(wire.OpInvalidate, []int64{id(secret)}), false},
		{"update", req(wire.OpUpdate, []int64{id(secret)}, []byte("y")), false},
		{"add_key", req(wire.OpAddKey, []int64{id(userRing)}, []byte("user"), []byte("planted"), []byte("x")), false},
		{"join a session", req(wire.OpJoinSession, nil, nil), false},
		{"session token", req(wire.OpSessionToken, nil), false},
		{"attach another token", req(wire.OpSessionAttach, nil, []byte(token)), false},
		{"session to parent", req(wire.OpSessionToParent, nil), false},
		{"set the reqkey keyring", req(wire.OpSetReqKeyKeyring, []int64{1}), false},
		{"persistent", req(wire.OpGetPersistent, []int64{-1, id(keys.SessionKeyring)}), false},
		{"restrict", req(wire.OpRestrictKeyring, []int64{id(userRing)}, nil, nil), false},
		{"watch", req(wire.OpWatchKey, []int64{id(secret), 1}), false},
		{"proc keys", req(wire.OpProcKeys, nil), false},
		{"key users", req(wire.OpProcKeyUsers, nil), false},
		{"sysctl get", req(wire.OpSysctlGet, nil), false},
		{"sysctl set", req(wire.OpSysctlSet, nil, []byte("maxkeys"), []byte("1")), false},
		{"status", req(wire.OpStatus, nil), false},
		{"dh_compute", req(wire.OpDHCompute, []int64{id(secret), id(secret), id(secret), 64}), false},
		{"an unknown operation", req(wire.Op(999), nil), false},
	} {
		spec := wire.SpecOf(c.r.Op)
		if spec == nil {
			if c.ok {
				t.Errorf("%s: no such operation", c.name)
			}
			continue // dispatch answers EOPNOTSUPP before any grant is asked
		}
		a, err := spec.Check(c.r)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		err = g.permits(g.caller, a)
		if c.ok && err != nil || !c.ok && !errors.Is(err, keys.EACCES) {
			t.Errorf("%s: %v, want allowed %v", c.name, err, c.ok)
		}
	}
	g.leave()

	// Constructed: the authorisation is used up, and with it the grant.
	if _, err := g.caller.AssumeAuthority(u.Key); err != nil {
		t.Fatal(err)
	}
	if err := g.caller.Instantiate(u.Key, []byte("made"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.enter(); !errors.Is(err, keys.EKEYREVOKED) {
		t.Fatalf("enter once the key is constructed: %v, want EKEYREVOKED", err)
	}
}

// A grant ends with its upcall even while its authorisation lasts, and a
// request admitted before the end keeps its caller until it is done.
func TestHelperGrantEnds(t *testing.T) {
	svc, _, u := upcallFor(t, "wanted")
	s := New(svc, Config{})
	token, g := s.addHelper(u)
	g.started(os.Getpid())
	if err := g.enter(); err != nil {
		t.Fatal(err)
	}
	s.dropHelper(token, g)
	s.mu.Lock()
	_, still := s.tokens.helpers[token]
	s.mu.Unlock()
	if still {
		t.Fatal("the token outlived its upcall")
	}
	// Admitted before the end: its caller is not released under it.
	if _, err := g.caller.AssumeAuthority(u.Key); err != nil {
		t.Fatalf("a request admitted before the end: %v", err)
	}
	g.leave()
	if err := g.enter(); !errors.Is(err, keys.EKEYREVOKED) {
		t.Fatalf("enter after the end: %v, want EKEYREVOKED", err)
	}
	// Released now: the caller holds no keyring any more.
	if g.caller.Session() != nil {
		t.Fatal("the grant's caller still holds its session after the end")
	}
	// The authorisation itself lasts until the upcall returns: the grant
	// ended on its own.
	if !u.Authorized() {
		t.Fatal("the authorisation ended with the grant")
	}
}

// pidHandle identifies pid as process.Open does for a connection.
func pidHandle(t *testing.T, pid int) *process.Handle {
	t.Helper()
	h := process.Open(nil, pid)
	t.Cleanup(h.Close)
	return &h
}
