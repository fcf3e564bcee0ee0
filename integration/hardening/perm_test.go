package hardening

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/endpoint"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
)

// The permission matrix through the daemon: every operation that needs a
// right, for every class (possessor, user, group, other) and every right
// (view, read, write, search, link, setattr) granted alone, run by client
// processes with real, different uids. The daemon learns each from
// SO_PEERCRED; the expected outcome is the kernel's key_task_permission
// (and the per-operation rules noted below), computed independently of
// package keys.
//
// Each case gets objects of its own, owned by uid 1000 gid 100 and made by
// root, so that no caller possesses them except the possessor, which links
// them into its session keyring before their mask is narrowed.

type permClass struct {
	name  string
	shift uint
}

var permClasses = []permClass{{"possessor", keys.PossessorShift}, {"user", keys.UserShift}, {"group", keys.GroupShift}, {"other", keys.OtherShift}}

var permRights = []struct {
	name  string
	right keys.Perm
}{{"view", keys.View}, {"read", keys.Read}, {"write", keys.Write}, {"search", keys.Search}, {"link", keys.Link}, {"setattr", keys.SetAttr}}

// permOp is an operation on a key (or, with ring set, on a keyring that
// links one child key) and the rule for when it is allowed, given the
// rights the caller holds on the object and whether it possesses it.
type permOp struct {
	name string
	ring bool
	// run builds the agent's call for object obj (child: the keyring's
	// key; own: the caller's session keyring).
	run     func(obj, child keys.Serial) call
	allowed func(has func(keys.Perm) bool, possessed bool) bool
}

func needs(r keys.Perm) func(func(keys.Perm) bool, bool) bool {
	return func(has func(keys.Perm) bool, _ bool) bool { return has(r) }
}

var permOps = []permOp{
	{"describe", false, func(k, _ keys.Serial) call { return call{Op: "describe", A: int64(k)} }, needs(keys.View)},
	// keyctl_get_security, refused view, looks for an authorisation to
	// construct the key and reports that search's ENOKEY.
	{"get_security", false, func(k, _ keys.Serial) call { return call{Op: "security", A: int64(k)} }, needs(keys.View)},
	{"watch", false, func(k, _ keys.Serial) call { return call{Op: "watch", A: int64(k), B: 1} }, needs(keys.View)},
	// The kernel lets a possessor read without the read right.
	{"read", false, func(k, _ keys.Serial) call { return call{Op: "read", A: int64(k)} },
		func(has func(keys.Perm) bool, poss bool) bool { return has(keys.Read) || poss }},
	{"update", false, func(k, _ keys.Serial) call { return call{Op: "update", A: int64(k), P: []byte("new")} }, needs(keys.Write)},
	// keyctl_revoke wants write, or failing that setattr.
	{"revoke", false, func(k, _ keys.Serial) call { return call{Op: "revoke", A: int64(k)} },
		func(has func(keys.Perm) bool, _ bool) bool { return has(keys.Write) || has(keys.SetAttr) }},
	{"invalidate", false, func(k, _ keys.Serial) call { return call{Op: "invalidate", A: int64(k)} }, needs(keys.Search)},
	{"set_timeout", false, func(k, _ keys.Serial) call { return call{Op: "timeout", A: int64(k), B: 3600} }, needs(keys.SetAttr)},
	// Changing the group to the key's own group needs setattr only.
	{"chgrp", false, func(k, _ keys.Serial) call { return call{Op: "chown", A: int64(k), B: -1, C: 100} }, needs(keys.SetAttr)},
	{"link", false, func(k, _ keys.Serial) call { return call{Op: "link", A: int64(k), B: int64(keys.SessionKeyring)} }, needs(keys.Link)},
	{"get_keyring_id", false, func(k, _ keys.Serial) call { return call{Op: "getid", A: int64(k)} }, needs(keys.Search)},
	{"list", true, func(r, _ keys.Serial) call { return call{Op: "read", A: int64(r)} },
		func(has func(keys.Perm) bool, poss bool) bool { return has(keys.Read) || poss }},
	{"search", true, func(r, _ keys.Serial) call { return call{Op: "search", A: int64(r), S: "user", T: "child"} }, needs(keys.Search)},
	{"add_into", true, func(r, _ keys.Serial) call {
		return call{Op: "add", A: int64(r), S: "user", T: "added", P: []byte("x")}
	}, needs(keys.Write)},
	{"link_into", true, func(r, _ keys.Serial) call {
		// Not the session keyring: the possessor's links the keyring, and
		// that link would close a cycle (EDEADLK).
		return call{Op: "link", A: int64(keys.UserKeyring), B: int64(r)}
	}, needs(keys.Write)},
	{"unlink_from", true, func(r, c keys.Serial) call { return call{Op: "unlink", A: int64(c), B: int64(r)} }, needs(keys.Write)},
	{"clear", true, func(r, _ keys.Serial) call { return call{Op: "clear", A: int64(r)} }, needs(keys.Write)},
	{"move_out", true, func(r, c keys.Serial) call {
		return call{Op: "move", A: int64(c), B: int64(r), C: int64(keys.SessionKeyring)}
	}, needs(keys.Write)},
	{"restrict", true, func(r, _ keys.Serial) call { return call{Op: "restrict", A: int64(r)} }, needs(keys.SetAttr)},
}

// permCase is one cell of the matrix.
type permCase struct {
	op         permOp
	class      permClass
	right      keys.Perm
	rightName  string
	caller     int // index into the callers
	obj, child keys.Serial
}

func TestPermissionMatrixOverSocket(t *testing.T) {
	needRoot(t)
	tun := keys.DefaultTunables()
	tun.MaxKeys, tun.MaxBytes = 100000, 100000000
	d := startDaemon(t, daemonConfig{tunables: &tun})
	// Root only prepares the objects: in process, for speed, on the same
	// service. The calls under test all go through the socket.
	root := client.New(server.NewLocal(d.svc, keys.Cred{UID: 0, GID: 0, PID: 1 << 22}))
	defer root.Close()
	runPermMatrix(t, root, func(w who) *agent { return startAgent(t, d, w) })
	d.settle(t)
}

// runPermMatrix makes the matrix's objects as root through root, runs
// every case by agents of the four kinds of caller, which start, and
// checks each answer against the kernel's rule.
func runPermMatrix(t *testing.T, root *client.Client, start func(who) *agent) {
	if _, err := root.JoinSessionKeyring(nil); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	callers := []who{asPossessor, asOwner, asGroup, asOther}
	agents := make([]*agent, len(callers))
	for i, w := range callers {
		agents[i] = start(w)
		// A fresh anonymous session each: only the possessor links the
		// objects into its own.
		agents[i].send(call{Op: "join", NilS: true})
	}
	for i, a := range agents {
		if r := a.recv(1)[0]; r.Errno != 0 {
			t.Fatalf("%s joining a session: %s", callers[i].name, r.Err)
		}
	}

	// Make every case's objects with every right for everyone, owned by
	// uid 1000 gid 100.
	var cases []*permCase
	for _, op := range permOps {
		for _, cl := range permClasses {
			for _, r := range permRights {
				for ci := range callers {
					pc := &permCase{op: op, class: cl, right: r.right, rightName: r.name, caller: ci}
					desc := fmt.Sprintf("%s-%s-%s-%s", op.name, cl.name, r.name, callers[ci].name)
					var err error
					if op.ring {
						if pc.obj, err = root.AddKey("keyring", desc, nil, keys.SessionKeyring); err != nil {
							t.Fatal(err)
						}
						if pc.child, err = root.AddKey("user", "child", []byte("c"), pc.obj); err != nil {
							t.Fatal(err)
						}
						if err := root.SetPerm(pc.child, keys.PermMask); err != nil {
							t.Fatal(err)
						}
					} else if pc.obj, err = root.AddKey("user", desc, []byte("payload"), keys.SessionKeyring); err != nil {
						t.Fatal(err)
					}
					if err := root.SetPerm(pc.obj, keys.PermMask); err != nil {
						t.Fatal(err)
					}
					if err := root.Chown(pc.obj, int64(asOwner.uid), int64(asOwner.gid)); err != nil {
						t.Fatal(err)
					}
					cases = append(cases, pc)
				}
			}
		}
	}
	// The possessor links its objects into its session keyring.
	var links []call
	for _, pc := range cases {
		if pc.caller == 0 {
			links = append(links, call{Op: "link", A: int64(pc.obj), B: int64(keys.SessionKeyring)})
		}
	}
	for i, r := range agents[0].do(links...) {
		if r.Errno != 0 {
			t.Fatalf("possessor linking %d: %s", links[i].A, r.Err)
		}
	}
	// Narrow each mask to the one right in the one class. Root may: the
	// full mask grants "other" setattr, and root owns nothing here.
	for _, pc := range cases {
		if err := root.SetPerm(pc.obj, pc.right<<pc.class.shift); err != nil {
			t.Fatalf("narrowing %d: %v", pc.obj, err)
		}
	}
	// Each caller runs its cases in one batch, all four at once.
	ran, denied := 0, 0
	mine := make([][]*permCase, len(agents))
	for ci, a := range agents {
		var calls []call
		for _, pc := range cases {
			if pc.caller == ci {
				mine[ci] = append(mine[ci], pc)
				calls = append(calls, pc.op.run(pc.obj, pc.child))
			}
		}
		a.send(calls...)
	}
	for ci, a := range agents {
		mine := mine[ci]
		for i, r := range a.recv(len(mine)) {
			pc := mine[i]
			want := expectAllowed(pc, callers[ci])
			name := fmt.Sprintf("%s by %s with %s-%s", pc.op.name, callers[ci].name, pc.class.name, pc.rightName)
			ran++
			switch {
			case want && r.Errno != 0:
				t.Errorf("%s: denied (%s), the kernel allows it", name, r.Err)
			case !want && r.Errno != int(deniedErr(pc.op)):
				t.Errorf("%s: got errno %d (%s), want %v", name, r.Errno, r.Err, deniedErr(pc.op))
			case want && pc.op.name == "search" && keys.Serial(r.N) != pc.child:
				t.Errorf("%s: found %d, want the child %d", name, r.N, pc.child)
			}
			if !want {
				denied++
			}
		}
	}
	t.Logf("%d operations by 4 uids over the socket, %d denied as expected (%v)", ran, denied, time.Since(began).Round(time.Millisecond))
}

// The same matrix against one daemon run as README says: the ukeyd
// command, started as root with no socket named, serving every user on
// the system socket; the agents are told nothing but where a packager
// put that socket, and find it as any program does.
func TestPermissionMatrixOnSystemDaemon(t *testing.T) {
	needRoot(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build ukeyd")
	}
	base, err := os.MkdirTemp("", "ukeys-system-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(gobin, "build", "-o", base, "github.com/ukeys/ukeys/cmd/ukeyd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ukeyd: %v\n%s", err, out)
	}
	system := filepath.Join(base, "run", "ukeyd.sock")
	env := []string{"PATH=/usr/bin:/bin", endpoint.SystemSocketEnv + "=" + system}
	ukeyd := exec.Command(filepath.Join(base, "ukeyd"), "-request-key", "", "-maxkeys", "100000", "-maxbytes", "100000000")
	ukeyd.Env = env
	var logs testutil.Buffer
	ukeyd.Stderr = &logs
	if err := ukeyd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ukeyd.Process.Signal(syscall.SIGTERM)
		ukeyd.Wait()
	})
	var root *client.Client
	testutil.Eventually(t, "ukeyd to serve", func() bool {
		root, err = client.Dial(system)
		return err == nil
	})
	defer root.Close()
	if !bytes.Contains(logs.Bytes(), []byte(`scope="every user"`)) {
		t.Fatalf("ukeyd does not say it serves every user:\n%s", logs.Bytes())
	}
	runPermMatrix(t, root, func(w who) *agent {
		a := startAgentEnv(t, w, env)
		if r := a.one(call{Op: "socket"}); string(r.Out) != system {
			t.Fatalf("%s found its daemon at %q, want the system socket %s", w.name, r.Out, system)
		}
		return a
	})
}

// expectAllowed is the kernel's rule for one cell: the caller's class
// byte (owner: user; a member of the key's group: group, if the group
// byte is not empty; anyone else: other), plus the possessor byte when
// the caller possesses the object. Possession itself needs the object to
// grant search to the possessor (through the possessor or its own class
// byte), since it is found by searching the caller's keyrings.
func expectAllowed(pc *permCase, w who) bool {
	granted := pc.right << pc.class.shift
	var classShift uint
	switch {
	case w.uid == asOwner.uid:
		classShift = keys.UserShift
	case granted&keys.GroupAll != 0 && (w.gid == asOwner.gid || contains(w.groups, asOwner.gid)):
		classShift = keys.GroupShift
	default:
		classShift = keys.OtherShift
	}
	mine := (granted >> classShift) & keys.All
	possessed := false
	if w.name == asPossessor.name {
		possessed = ((mine | (granted>>keys.PossessorShift)&keys.All) & keys.Search) != 0
	}
	have := mine
	if possessed {
		have |= (granted >> keys.PossessorShift) & keys.All
	}
	return pc.op.allowed(func(r keys.Perm) bool { return have&r == r }, possessed)
}

// deniedErr is the errno of a refusal: EACCES, except where the kernel
// answers otherwise.
func deniedErr(op permOp) keys.Errno {
	if op.name == "get_security" {
		return keys.ENOKEY
	}
	return keys.EACCES
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
