package hardening

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// A request-key helper's token must be worth no more than the kernel's
// authorisation key: only to the helper's own process tree, only while the
// upcall and its authority last, and only for what request_key_auth
// grants. These tests leak a helper's token (helperMain's "agent" and
// "child" modes write it into a file and then serve calls as an agent)
// and try to use it.

// tokenScene is a daemon whose helper leaks its token, and a requester of
// uid 1000 with keys in its user keyring, which its searches reach (it has
// no session keyring of its own, so it searches its user-session keyring).
type tokenScene struct {
	t        *testing.T
	d        *daemon
	dir      string // the helper's token file and named pipes
	owner    *agent // the requester; busy while its request is pending
	owner2   *agent // another process of the requester, to look
	secret   keys.Serial
	sub      keys.Serial
	userRing keys.Serial
}

func newTokenScene(t *testing.T, mode string, timeout time.Duration) *tokenScene {
	t.Helper()
	needRoot(t)
	agentBinary(t)
	dir, err := os.MkdirTemp("", "ukeys-helper-token-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, f := range []string{"in", "out"} {
		if err := syscall.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, daemonConfig{helper: helperCmd(mode + "=" + dir), opts: []keys.Option{keys.WithUpcallTimeout(timeout)}})
	s := &tokenScene{t: t, d: d, dir: dir, owner: startAgent(t, d, asOwner), owner2: startAgent(t, d, asOwner)}
	rs := s.owner.do(
		call{Op: "add", A: int64(keys.UserKeyring), S: "user", T: "secret", P: []byte("top secret")},
		call{Op: "add", A: int64(keys.UserKeyring), S: "user", T: "subsrc", P: []byte("subval")},
		call{Op: "getid", A: int64(keys.UserKeyring)},
	)
	for _, r := range rs {
		if r.Errno != 0 {
			t.Fatalf("requester's keys: %+v", rs)
		}
	}
	s.secret, s.sub, s.userRing = keys.Serial(rs[0].N), keys.Serial(rs[1].N), keys.Serial(rs[2].N)
	return s
}

// helperRun is one upcall's helper, seen through its leaked token file.
type helperRun struct {
	s     *tokenScene
	token string
	pid   int
	key   keys.Serial
	h     *agent // the helper (or its child) serving calls
	in    *os.File
	out   *os.File
}

// request makes the requester ask for key desc with a callout (its answer
// comes later: answer) and returns the helper, once it has leaked its
// token and opened its pipes.
func (s *tokenScene) request(desc string) *helperRun {
	t := s.t
	t.Helper()
	s.owner.send(call{Op: "request", S: "user", T: desc, P: []byte("callout-info")})
	path := filepath.Join(s.dir, "token")
	var b []byte
	testutil.Eventually(t, "the helper to leak its token", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	os.Remove(path)
	f := strings.Fields(string(b))
	if len(f) != 3 || len(f[0]) != 32 {
		t.Fatalf("token file %q", b)
	}
	run := &helperRun{s: s, token: f[0]}
	run.pid, _ = strconv.Atoi(f[1])
	key, _ := strconv.Atoi(f[2])
	run.key = keys.Serial(key)
	type ends struct {
		in, out *os.File
		err     error
	}
	opened := make(chan ends, 1)
	go func() {
		// In the helper's order: each open waits for the other side's.
		in, err := os.OpenFile(filepath.Join(s.dir, "in"), os.O_WRONLY, 0)
		if err != nil {
			opened <- ends{err: err}
			return
		}
		out, err := os.OpenFile(filepath.Join(s.dir, "out"), os.O_RDONLY, 0)
		opened <- ends{in, out, err}
	}()
	select {
	case e := <-opened:
		if e.err != nil {
			t.Fatal(e.err)
		}
		run.in, run.out = e.in, e.out
	case <-time.After(time.Minute):
		t.Fatal("the helper did not open its pipes")
	}
	run.h = &agent{t: t, who: who{name: "helper"}, in: run.in, out: bufio.NewReader(run.out), errb: &testutil.Buffer{}}
	t.Cleanup(run.close)
	return run
}

// answer is the requester's answer to its request. As the kernel's
// request_key waits for /sbin/request-key to exit, it comes once the
// helper has exited (closeAndWait) or the upcall has timed out.
func (s *tokenScene) answer() reply {
	s.t.Helper()
	return s.owner.recv(1)[0]
}

// close ends the helper's calls: an agent helper then exits.
func (run *helperRun) close() {
	run.in.Close()
	run.out.Close()
}

// closeAndWait closes and waits for the helper to be gone, so that the
// next helper has the pipes to itself.
func (run *helperRun) closeAndWait() {
	run.close()
	testutil.Eventually(run.s.t, "the helper to exit", func() bool { return reaped(run.pid) })
}

// reaped reports whether the process pid is gone and reaped. A zombie
// does not count: the leader of a process whose other threads are still
// exiting shows as one, and its children are not reparented yet.
func reaped(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

func raw(op wire.Op, ints ...int64) call {
	return call{Op: "raw", A: int64(op), Ints: ints}
}

func rawAttach(token string) call {
	return call{Op: "raw", A: int64(wire.OpSessionAttach), Bufs: [][]byte{[]byte(token)}}
}

// wantErrnos checks each reply's errno against want (0: success).
func wantErrnos(t *testing.T, what string, calls []call, rs []reply, want ...keys.Errno) {
	t.Helper()
	for i, r := range rs {
		if r.Errno != int(want[i]) {
			t.Errorf("%s: call %d (%s %d %v): errno %d (%s), want %d (%v); output %q",
				what, i, calls[i].Op, calls[i].A, calls[i].Ints, r.Errno, r.Err, want[i], want[i], r.Out)
		}
	}
}

// runWithToken runs an agent as w with the helper token in its
// environment, as a process that found it would: client.Dial presents it.
// It reports whether the agent ran (its dial was accepted), the replies
// to calls, and its stderr.
func runWithToken(t *testing.T, d *daemon, w who, token string, calls ...call) (bool, []reply, string) {
	t.Helper()
	cmd := exec.Command(agentBinary(t), "-test.run=^$")
	cmd.Env = []string{agentEnv + "=1", "UKEYS_SOCKET=" + d.path, client.HelperEnv + "=" + token}
	if w.uid != 0 {
		cmd.SysProcAttr = ukeystest.As(w.uid, w.gid, w.groups...)
	}
	b, _ := json.Marshal(calls)
	cmd.Stdin = bytes.NewReader(append(b, '\n'))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var rs []reply
	if err == nil {
		json.Unmarshal(out.Bytes(), &rs)
	} else {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
	}
	return err == nil, rs, errb.String()
}

// A leaked token presented by another uid, or by another process of the
// helper's own uid (root) that is not its descendant, is refused, on the
// wire and through the environment, and gives no access to the
// requester's keys; the real helper's token still works afterwards (a
// refusal does not burn it).
func TestHelperTokenOutsideTheHelpersTree(t *testing.T) {
	s := newTokenScene(t, "agent", time.Minute)
	run := s.request("wanted")
	// As the kernel's request-key does: the helper assumes its authority
	// first, which makes the requester's keys possessed for it.
	if r := run.h.one(call{Op: "assume", A: int64(run.key)}); r.Errno != 0 {
		t.Fatalf("the helper assumes its authority: %+v", r)
	}
	attacks := []call{
		{Op: "rawdial"},
		rawAttach(run.token),
		raw(wire.OpRead, int64(s.secret)),
		raw(wire.OpRead, int64(s.userRing)),
		raw(wire.OpSetPerm, int64(s.secret), 0x3f3f3f3f),
		raw(wire.OpDescribe, int64(run.key)),
		raw(wire.OpRead, int64(keys.ReqKeyAuthKey)),
		raw(wire.OpInstantiate, int64(run.key), 0),
	}
	attacks[len(attacks)-1].Bufs = [][]byte{[]byte("forged")}
	for _, w := range []who{asOther, asRoot} {
		a := startAgent(t, s.d, w)
		rs := a.do(attacks...)
		wantErrnos(t, w.name+" on the wire", attacks, rs, 0, keys.EACCES, keys.EACCES, keys.EACCES, keys.EACCES, keys.EACCES, keys.ENOKEY, keys.EPERM)

		// Through the environment, as client.Dial presents it: the dial
		// itself fails.
		ran, rs, stderr := runWithToken(t, s.d, w, run.token,
			call{Op: "read", A: int64(s.secret)},
			call{Op: "read", A: int64(s.userRing)},
			call{Op: "setperm", A: int64(s.secret), B: 0x3f3f3f3f})
		if ran {
			t.Errorf("%s with the token in its environment was served: %+v", w.name, rs)
		} else if !strings.Contains(stderr, "helper token refused") || !strings.Contains(stderr, keys.EACCES.Error()) {
			t.Errorf("%s with the token in its environment: %q, want the token refused with EACCES", w.name, stderr)
		}
	}
	// The requester's keys are as they were.
	rs := s.owner2.do(call{Op: "describe", A: int64(s.secret)}, call{Op: "read", A: int64(s.secret)})
	if rs[0].Errno != 0 || !strings.Contains(string(rs[0].Out), ";3f010000;secret") || string(rs[1].Out) != "top secret" {
		t.Fatalf("the requester's key after the attacks: %+v", rs)
	}

	// The helper's own token still works: for a second connection of its
	// own, and to construct the key.
	calls := []call{
		{Op: "rawdial"},
		rawAttach(run.token),
		raw(wire.OpDescribe, int64(run.key)),
		{Op: "instantiate", A: int64(run.key), P: []byte("made")},
	}
	wantErrnos(t, "the helper after the attacks", calls, run.h.do(calls...), 0, 0, 0, 0)
	run.closeAndWait()
	if r := s.answer(); r.Errno != 0 || keys.Serial(r.N) != run.key {
		t.Fatalf("the requester's answer: %+v", r)
	}
	if r := s.owner2.one(call{Op: "read", A: int64(run.key)}); string(r.Out) != "made" {
		t.Fatalf("the constructed key: %+v", r)
	}
	// The refusals are logged, and the token is not.
	logs := s.d.logs.Bytes()
	if !bytes.Contains(logs, []byte("outside the helper's tree")) {
		t.Error("the refused token is not logged")
	}
	if bytes.Contains(logs, []byte(run.token)) {
		t.Error("a log line holds the helper's token")
	}
}

// Once the key is instantiated, negated or rejected the authorisation is
// used up, and with it the token: a connection that attached before can
// do nothing more (EKEYREVOKED), not even as the requester's uid, and the
// token attaches no more, even for the helper itself.
func TestHelperTokenDiesWithItsKey(t *testing.T) {
	s := newTokenScene(t, "agent", time.Minute)
	for _, c := range []struct {
		how    string
		settle func(key keys.Serial) call
		answer keys.Errno
	}{
		{"instantiated", func(key keys.Serial) call {
			c := raw(wire.OpInstantiate, int64(key), 0)
			c.Bufs = [][]byte{[]byte("made")}
			return c
		}, 0},
		{"negated", func(key keys.Serial) call { return raw(wire.OpNegate, int64(key), 30, 0) }, keys.ENOKEY},
		{"rejected", func(key keys.Serial) call {
			return raw(wire.OpReject, int64(key), 30, int64(keys.EKEYREJECTED), 0)
		}, keys.EKEYREJECTED},
	} {
		run := s.request("dies-" + c.how)
		// Two connections attached with the token: the helper's agent
		// connection and a raw one, which settles the key.
		calls := []call{
			{Op: "assume", A: int64(run.key)},
			{Op: "rawdial"},
			rawAttach(run.token),
			{Op: "describe", A: int64(run.key)},
			c.settle(run.key),
		}
		wantErrnos(t, c.how+": the helper", calls, run.h.do(calls...), 0, 0, 0, 0, 0)
		calls = []call{
			{Op: "describe", A: int64(run.key)},
			{Op: "read", A: int64(s.userRing)},
			{Op: "read", A: int64(s.secret)},
			{Op: "read", A: int64(keys.ReqKeyAuthKey)},
			{Op: "add", A: int64(keys.UserKeyring), S: "user", T: "planted", P: []byte("x")},
			raw(wire.OpRead, int64(s.userRing)),
			raw(wire.OpGetKeyringID, int64(keys.UserKeyring), 0),
			{Op: "rawdial"},
			rawAttach(run.token),
		}
		wantErrnos(t, "after the key was "+c.how, calls, run.h.do(calls...),
			keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED,
			keys.EKEYREVOKED, keys.EKEYREVOKED, 0, keys.EKEYREVOKED)
		run.closeAndWait()
		if r := s.answer(); r.Errno != int(c.answer) {
			t.Fatalf("%s: the requester's answer: %+v, want errno %d", c.how, r, c.answer)
		}
	}
}

// When the upcall times out the helper is killed; a descendant that
// survived the kill (in a process group of its own) and had attached with
// the token can do nothing more, and does not fall back to acting as the
// requester's uid; nor can it attach again.
func TestHelperTokenDiesWithTheUpcall(t *testing.T) {
	s := newTokenScene(t, "child", 5*time.Second)
	run := s.request("slow")
	// The child attached when it started (client.Dial); whether this
	// lands before the timeout depends on the machine's speed.
	run.h.one(call{Op: "assume", A: int64(run.key)})
	if r := s.answer(); r.Errno != int(keys.ENOKEY) {
		t.Fatalf("the requester's answer at the timeout: %+v, want ENOKEY", r)
	}
	testutil.Eventually(t, "the helper to be killed and reaped", func() bool { return reaped(run.pid) })
	calls := []call{
		{Op: "read", A: int64(s.userRing)},
		{Op: "read", A: int64(keys.UserKeyring)},
		{Op: "read", A: int64(s.secret)},
		{Op: "describe", A: int64(run.key)},
		{Op: "getid", A: int64(keys.SessionKeyring)},
		{Op: "add", A: int64(keys.UserKeyring), S: "user", T: "planted", P: []byte("x")},
		{Op: "setperm", A: int64(s.secret), B: 0x3f3f3f3f},
		{Op: "rawdial"},
		rawAttach(run.token),
	}
	wantErrnos(t, "after the upcall timed out", calls, run.h.do(calls...),
		keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED, keys.EKEYREVOKED,
		keys.EKEYREVOKED, keys.EKEYREVOKED, 0, keys.EACCES)
	if r := s.owner2.one(call{Op: "read", A: int64(s.userRing)}); r.Errno != 0 || len(r.Out) != 8 {
		t.Fatalf("the requester's user keyring: %+v, want its two keys", r)
	}
}

// The helper acts for its requester only within request_key_auth: it may
// assume its authority, describe the key, read the callout information,
// find and read a key in the requester's keyrings (%{user:desc}) and
// instantiate (into a keyring of the requester's), negate or reject the
// key; it may not list the requester's keyrings, change, link, unlink or
// revoke its keys, or add keys.
func TestHelperRights(t *testing.T) {
	s := newTokenScene(t, "agent", time.Minute)
	run := s.request("wanted")
	h := run.h
	rs := h.do(
		call{Op: "assume", A: int64(run.key)},
		call{Op: "describe", A: int64(run.key)},
		call{Op: "read", A: int64(keys.ReqKeyAuthKey)},
		call{Op: "describe", A: int64(keys.ReqKeyAuthKey)},
		call{Op: "request", S: "user", T: "subsrc", NilS: true},
		call{Op: "read", A: int64(s.sub)},
		call{Op: "search", A: int64(s.userRing), S: "user", T: "subsrc"},
		call{Op: "getid", A: int64(keys.SessionKeyring)},
		call{Op: "timeout", A: int64(run.key), B: 3600},
	)
	for i, r := range rs {
		if r.Errno != 0 {
			t.Fatalf("legitimate call %d: %+v", i, r)
		}
	}
	if !strings.HasPrefix(string(rs[1].Out), "user;1000;100;") || !strings.HasSuffix(string(rs[1].Out), ";wanted") {
		t.Errorf("describe the key: %q", rs[1].Out)
	}
	if string(rs[2].Out) != "callout-info" {
		t.Errorf("callout information: %q", rs[2].Out)
	}
	if !strings.HasPrefix(string(rs[3].Out), ".request_key_auth;") {
		t.Errorf("describe the authorisation: %q", rs[3].Out)
	}
	if keys.Serial(rs[4].N) != s.sub || string(rs[5].Out) != "subval" || keys.Serial(rs[6].N) != s.sub {
		t.Errorf("%%{user:subsrc}: request %d, read %q, search %d; want %d, \"subval\"", rs[4].N, rs[5].Out, rs[6].N, s.sub)
	}

	refused := []call{
		// A second connection of the helper's, attached with its token,
		// for the requests the agent has no call for.
		{Op: "rawdial"},
		rawAttach(run.token),
		raw(wire.OpDHCompute, int64(s.secret), int64(s.secret), int64(s.secret), 64),
		raw(wire.OpStatus),
		raw(wire.OpSysctlGet),
		{Op: "read", A: int64(s.userRing)},
		{Op: "read", A: int64(keys.UserKeyring)},
		{Op: "read", A: int64(keys.UserSessionKeyring)},
		{Op: "setperm", A: int64(s.secret), B: 0x3f3f3f3f},
		{Op: "setperm", A: int64(run.key), B: 0x3f3f3f3f},
		{Op: "unlink", A: int64(s.secret), B: int64(s.userRing)},
		{Op: "add", A: int64(s.userRing), S: "user", T: "planted", P: []byte("x")},
		{Op: "add", A: int64(keys.SessionKeyring), S: "user", T: "planted", P: []byte("x")},
		{Op: "link", A: int64(s.secret), B: int64(keys.SessionKeyring)},
		{Op: "move", A: int64(s.secret), B: int64(s.userRing), C: int64(keys.SessionKeyring)},
		{Op: "revoke", A: int64(s.secret)},
		{Op: "invalidate", A: int64(s.secret)},
		{Op: "update", A: int64(s.secret), P: []byte("changed")},
		{Op: "chown", A: int64(s.secret), B: 1002, C: -1},
		{Op: "clear", A: int64(s.userRing)},
		{Op: "restrict", A: int64(s.userRing)},
		{Op: "describe", A: int64(s.secret)},
		{Op: "timeout", A: int64(s.secret), B: 1},
		{Op: "search", A: int64(s.userRing), S: "user", T: "subsrc", B: int64(keys.SessionKeyring)},
		{Op: "request", A: int64(s.userRing), S: "user", T: "subsrc", NilS: true},
		{Op: "assume", A: int64(s.secret)},
		{Op: "getid", A: int64(keys.ThreadKeyring), B: 1},
		{Op: "getid", A: int64(s.secret)},
		{Op: "watch", A: int64(s.secret), B: 1},
		{Op: "join", NilS: true},
		{Op: "token"},
		{Op: "proc"},
		{Op: "parent"},
		{Op: "sysctl", S: "maxkeys", T: "1"},
		{Op: "persistent", A: -1, B: int64(keys.SessionKeyring)},
	}
	want := make([]keys.Errno, len(refused))
	for i := 2; i < len(want); i++ {
		want[i] = keys.EACCES
	}
	wantErrnos(t, "beyond the authority", refused, h.do(refused...), want...)
	// Apart, as it would start another upcall (and wait for it) if it
	// were let through: constructing a key in the requester's name.
	calls := []call{{Op: "request", S: "user", T: "more", P: []byte("callout")}}
	wantErrnos(t, "beyond the authority", calls, h.do(calls...), keys.EACCES)

	// Nothing of the requester's changed.
	rs = s.owner2.do(
		call{Op: "describe", A: int64(s.secret)},
		call{Op: "read", A: int64(s.secret)},
		call{Op: "read", A: int64(s.userRing)},
	)
	if !strings.Contains(string(rs[0].Out), ";3f010000;secret") || string(rs[1].Out) != "top secret" || len(rs[2].Out) != 8 {
		t.Fatalf("the requester's keys after the helper: %+v", rs)
	}

	// Constructed into a keyring of the requester's, as `keyctl
	// instantiate %k data %S` does.
	if r := h.one(call{Op: "instantiate", A: int64(run.key), P: []byte("made"), B: int64(s.userRing)}); r.Errno != 0 {
		t.Fatalf("instantiate into the requester's keyring: %+v", r)
	}
	run.closeAndWait()
	if r := s.answer(); r.Errno != 0 || keys.Serial(r.N) != run.key {
		t.Fatalf("the requester's answer: %+v", r)
	}
	rs = s.owner2.do(call{Op: "read", A: int64(run.key)}, call{Op: "read", A: int64(s.userRing)})
	if string(rs[0].Out) != "made" || len(rs[1].Out) != 12 {
		t.Fatalf("the constructed key: %+v", rs)
	}

	// Negated, and rejected through a second connection of the helper's.
	run = s.request("negated")
	calls = []call{{Op: "assume", A: int64(run.key)}, {Op: "negate", A: int64(run.key), B: 30}}
	wantErrnos(t, "negate", calls, run.h.do(calls...), 0, 0)
	run.closeAndWait()
	if r := s.answer(); r.Errno != int(keys.ENOKEY) {
		t.Fatalf("the requester's answer to a negated key: %+v", r)
	}
	run = s.request("rejected")
	calls = []call{
		{Op: "assume", A: int64(run.key)},
		{Op: "rawdial"},
		rawAttach(run.token),
		raw(wire.OpReject, int64(run.key), 30, int64(keys.EKEYREJECTED), 0),
	}
	wantErrnos(t, "reject", calls, run.h.do(calls...), 0, 0, 0, 0)
	run.closeAndWait()
	if r := s.answer(); r.Errno != int(keys.EKEYREJECTED) {
		t.Fatalf("the requester's answer to a rejected key: %+v", r)
	}
}
