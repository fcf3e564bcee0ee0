package hardening

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/server/metrics"
	"github.com/ukeys/ukeys/ukeystest"
	"github.com/ukeys/ukeys/wire"
)

// agentEnv set in a child's environment makes this test binary an agent:
// a client process that runs the calls its parent sends (see agentMain).
const agentEnv = "UKEYS_HARDENING_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) != "" {
		os.Exit(agentMain(os.Stdin, os.Stdout))
	}
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2], os.Args[3:]))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ---- the daemon under test ----

// daemon is a keys.Service served on a Unix socket in a directory every
// uid can reach, with its logs and metrics captured.
type daemon struct {
	*ukeystest.Daemon
	svc  *keys.Service
	srv  *server.Server
	dir  string
	path string
	logs *testutil.Buffer
	reg  *prometheus.Registry
}

type daemonConfig struct {
	opts []keys.Option
	// helper, if set, is the request-key helper program and its arguments.
	helper []string
	// tunables, if set, replace the defaults.
	tunables *keys.Tunables
	// readTimeout, if set, bounds a connection's silence.
	readTimeout time.Duration
	// maxConns, if set, bounds each uid's connections (default 64).
	maxConns int
	// limits, if set, are the server's other bounds.
	limits server.Limits
	// writeTimeout, if set, bounds how long an answer may take to leave.
	writeTimeout time.Duration
}

func startDaemon(t testing.TB, cfg daemonConfig) *daemon {
	t.Helper()
	d := &daemon{logs: &testutil.Buffer{}, reg: prometheus.NewRegistry()}
	log := slog.New(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := metrics.New(d.reg)
	rt := cfg.readTimeout
	if rt == 0 {
		rt = 5 * time.Minute // agents may wait long between calls on a busy machine
	}
	mc := cfg.maxConns
	if mc == 0 {
		mc = 64
	}
	lim := cfg.limits
	if lim.MaxConnsPerUID == 0 {
		lim.MaxConnsPerUID = mc
	}
	opts := []ukeystest.Option{
		ukeystest.WithDirMode(0o755), // agents run as other uids
		ukeystest.WithKeys(cfg.opts...),
		ukeystest.WithConfig(server.Config{Logger: log, Metrics: m, ReadTimeout: rt,
			Limits: lim, WriteTimeout: cfg.writeTimeout}),
	}
	if cfg.helper != nil {
		opts = append(opts, ukeystest.WithHelper(cfg.helper[0], cfg.helper[1:]...))
	}
	if cfg.tunables != nil {
		opts = append(opts, ukeystest.WithTunables(*cfg.tunables))
	}
	d.Daemon = ukeystest.NewDaemon(t, opts...)
	d.svc, d.srv, d.dir, d.path = d.Service, d.Server, d.Dir, d.Socket
	m.RegisterService(d.reg, d.svc)
	return d
}

func (d *daemon) dial(t testing.TB) *client.Client {
	t.Helper()
	return d.Dial(t)
}

// metricsText scrapes the daemon's Prometheus endpoint.
func (d *daemon) metricsText() []byte {
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.Bytes()
}

// settle waits for the collector and then checks the keys invariants.
func (d *daemon) settle(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The daemon releases an exited client process's keyrings on its own
	// schedule (at its last close, or when its watch sees it gone), so
	// keys may still be on their way out after one wait: the invariants
	// must hold once that is over, and a leak fails after 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := d.svc.WaitGC(ctx); err != nil {
			t.Fatal(err)
		}
		err := d.svc.Check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- agents: client processes with real, different credentials ----

// who is a set of credentials an agent runs with.
type who struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32
}

var (
	asRoot      = who{"root", 0, 0, nil}
	asOwner     = who{"user", 1000, 100, nil}
	asGroup     = who{"group", 1001, 200, []uint32{100}}
	asOther     = who{"other", 1002, 300, nil}
	asPossessor = who{"possessor", 1003, 300, nil}
	asNobody    = who{"nobody", 65534, 65534, nil}
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
)

// agentBinary is a copy of this test binary that every uid can execute.
func agentBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		// A failure here fails this test (t.Fatal ends the Once too)
		// and leaves binPath empty for the tests after it.
		dir, err := os.MkdirTemp("", "ukeys-hardening-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir // TestMain removes it
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "agent.test")
		ukeystest.CopyExecutable(t, os.Args[0], path)
		binPath = path
	})
	if binPath == "" {
		t.Fatal("no agent binary: making it failed in an earlier test")
	}
	return binPath
}

func needRoot(t testing.TB) {
	t.Helper()
	ukeystest.NeedRoot(t, "the test runs its clients as other uids (1000-1003, 65534)")
}

// call is one operation an agent runs; reply is its outcome.
type call struct {
	Op   string `json:"op"`
	A    int64  `json:"a,omitempty"`
	B    int64  `json:"b,omitempty"`
	C    int64  `json:"c,omitempty"`
	S    string `json:"s,omitempty"`
	T    string `json:"t,omitempty"`
	P    []byte `json:"p,omitempty"`
	NilS bool   `json:"nils,omitempty"`
	// For "loop": the calls to repeat until the agent is killed; an A of
	// usePrev stands for the serial the first call of the round returned.
	Seq []call `json:"seq,omitempty"`
	// For "raw": the request's integers and buffers.
	Ints []int64  `json:"ints,omitempty"`
	Bufs [][]byte `json:"bufs,omitempty"`
}

type reply struct {
	Errno int     `json:"errno"`
	N     int64   `json:"n"`
	Out   []byte  `json:"out,omitempty"`
	Err   string  `json:"err,omitempty"`
	Ints  []int64 `json:"ints,omitempty"`
}

// agent is a running agent process.
type agent struct {
	t    testing.TB
	who  who
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	errb *testutil.Buffer
}

// startAgent runs an agent as w, connected to d, with env added.
func startAgent(t testing.TB, d *daemon, w who, env ...string) *agent {
	t.Helper()
	return startAgentEnv(t, w, append([]string{"UKEYS_SOCKET=" + d.path}, env...))
}

// startAgentEnv starts an agent as w with exactly env (and the agent's
// own variable): it finds its daemon as any program does.
func startAgentEnv(t testing.TB, w who, env []string) *agent {
	t.Helper()
	cmd := exec.Command(agentBinary(t), "-test.run=^$")
	cmd.Env = append([]string{agentEnv + "=1"}, env...)
	if w.uid != 0 {
		cmd.SysProcAttr = ukeystest.As(w.uid, w.gid, w.groups...)
	}
	a := &agent{t: t, who: w, cmd: cmd, errb: &testutil.Buffer{}}
	cmd.Stderr = a.errb
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a.in, a.out = in, bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	return a
}

// do runs calls in order in the agent and returns their replies.
func (a *agent) do(calls ...call) []reply {
	a.t.Helper()
	b, _ := json.Marshal(calls)
	if _, err := a.in.Write(append(b, '\n')); err != nil {
		a.t.Fatalf("agent %s: %v\n%s", a.who.name, err, a.errb.Bytes())
	}
	return a.recv(len(calls))
}

// recv reads the replies to n calls sent before.
func (a *agent) recv(n int) []reply {
	a.t.Helper()
	line, err := a.out.ReadBytes('\n')
	if err != nil {
		a.t.Fatalf("agent %s: %v\n%s", a.who.name, err, a.errb.Bytes())
	}
	var rs []reply
	if err := json.Unmarshal(line, &rs); err != nil || len(rs) != n {
		a.t.Fatalf("agent %s answered %q: %v", a.who.name, line, err)
	}
	return rs
}

// one runs a single call.
func (a *agent) one(c call) reply {
	a.t.Helper()
	return a.do(c)[0]
}

// send starts calls without waiting for the answer.
func (a *agent) send(calls ...call) {
	b, _ := json.Marshal(calls)
	a.in.Write(append(b, '\n'))
}

func (a *agent) kill() {
	if a.cmd.Process != nil {
		a.cmd.Process.Kill()
	}
}

func (a *agent) stop() {
	a.in.Close()
	done := make(chan struct{})
	go func() { a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		a.cmd.Process.Kill()
		<-done
	}
}

// agentMain serves calls from r: one JSON array of calls per line, one
// JSON array of replies per line on w.
func agentMain(r io.Reader, w io.Writer) int {
	var cl *client.Client
	dial := func() error {
		if cl != nil {
			cl.Close()
		}
		var err error
		cl, err = client.Dial(client.DefaultSocket()) // $UKEYS_SOCKET, else as any program finds it
		return err
	}
	if err := dial(); err != nil {
		fmt.Fprintln(os.Stderr, "agent: dial:", err)
		return 1
	}
	st := &agentState{}
	defer func() {
		if st.raw != nil {
			st.raw.Close()
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 8<<20)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		var calls []call
		if err := json.Unmarshal(sc.Bytes(), &calls); err != nil {
			fmt.Fprintln(os.Stderr, "agent: bad input:", err)
			return 1
		}
		out := make([]reply, len(calls))
		for i, c := range calls {
			if strings.HasPrefix(c.Op, "raw") || c.Op == "listen" || strings.HasPrefix(c.Op, "hog") {
				out[i] = st.run(c)
				continue
			}
			out[i] = runCall(&cl, dial, c)
		}
		if err := enc.Encode(out); err != nil {
			return 1
		}
	}
	if cl != nil {
		cl.Close()
	}
	return 0
}

func runCall(clp **client.Client, dial func() error, c call) reply {
	cl := *clp
	id := keys.Serial(c.A)
	var n keys.Serial
	var out []byte
	var err error
	switch c.Op {
	case "dial": // reconnect, presenting session token S if set
		if c.S != "" {
			os.Setenv(client.SessionEnv, c.S)
		} else {
			os.Unsetenv(client.SessionEnv)
		}
		err = dial()
	case "add":
		n, err = cl.AddKey(c.S, c.T, c.P, id)
	case "request":
		var callout []byte
		if !c.NilS {
			callout = c.P
		}
		n, err = cl.RequestKey(c.S, c.T, callout, id)
	case "read":
		out, err = cl.Read(id)
	case "describe":
		var s string
		s, err = cl.Describe(id)
		out = []byte(s)
	case "update":
		err = cl.Update(id, c.P)
	case "revoke":
		err = cl.Revoke(id)
	case "invalidate":
		err = cl.Invalidate(id)
	case "timeout":
		err = cl.SetTimeout(id, uint32(c.B))
	case "setperm":
		err = cl.SetPerm(id, keys.Perm(c.B))
	case "chown":
		err = cl.Chown(id, c.B, c.C)
	case "link":
		err = cl.Link(id, keys.Serial(c.B))
	case "unlink":
		err = cl.Unlink(id, keys.Serial(c.B))
	case "search":
		n, err = cl.Search(id, c.S, c.T, keys.Serial(c.B))
	case "clear":
		err = cl.Clear(id)
	case "move":
		err = cl.Move(id, keys.Serial(c.B), keys.Serial(c.C), 0)
	case "restrict":
		err = cl.RestrictKeyring(id, nil, nil)
	case "getid":
		n, err = cl.GetKeyringID(id, c.B != 0)
	case "security":
		var s string
		s, err = cl.GetSecurity(id)
		out = []byte(s)
	case "watch":
		err = cl.WatchKey(id, int(c.B))
	case "join":
		var name *string
		if !c.NilS {
			name = &c.S
		}
		n, err = cl.JoinSessionKeyring(name)
	case "token":
		var s string
		s, err = cl.SessionToken()
		out = []byte(s)
	case "sysctl":
		err = cl.SetSysctl(c.S, c.T)
	case "persistent":
		n, err = cl.GetPersistent(c.A, keys.Serial(c.B))
	case "instantiate":
		err = cl.Instantiate(id, c.P, keys.Serial(c.B))
	case "negate":
		err = cl.Negate(id, uint32(c.B), keys.Serial(c.C))
	case "assume":
		n, err = cl.AssumeAuthority(id)
	case "proc":
		var s string
		s, err = cl.ProcKeys()
		out = []byte(s)
	case "parent":
		err = cl.SessionToParent()
	case "flood": // add keys into ring A until one fails; N counts successes
		var i int64
		for ; ; i++ {
			if _, err = cl.AddKey("user", fmt.Sprintf("flood-%d", i), c.P, id); err != nil {
				break
			}
		}
		n = keys.Serial(i)
	case "loop":
		for round := 0; ; round++ {
			var first reply
			for i, sc := range c.Seq {
				if sc.A == usePrev {
					sc.A = first.N
				}
				sc.T = strings.ReplaceAll(sc.T, "{round}", strconv.Itoa(round))
				r := runCall(clp, dial, sc)
				if i == 0 {
					first = r
				}
			}
		}
	case "dh": // dh_compute with private A, prime B, base C
		out, err = cl.DHCompute(id, keys.Serial(c.B), keys.Serial(c.C))
	case "socket": // where the agent found its daemon
		out = []byte(client.DefaultSocket())
	case "sleep":
		time.Sleep(time.Duration(c.A) * time.Millisecond)
	default:
		return reply{Errno: -1, Err: "agent: unknown op " + c.Op}
	}
	r := reply{N: int64(n), Out: out}
	if err != nil {
		r.Err = err.Error()
		var ce *client.Error
		if errors.As(err, &ce) {
			r.Errno = int(ce.Errno)
		} else {
			r.Errno = -1
		}
	}
	return r
}

// usePrev in a looped call's A stands for the first call's result.
const usePrev = -1000

// agentState is an agent's raw connection: requests sent as the wire
// protocol allows, not as the client package would send them.
type agentState struct {
	raw net.Conn
	tag uint32
}

func (st *agentState) run(c call) reply {
	switch c.Op {
	case "rawdial": // a fresh connection, handshake done
		if st.raw != nil {
			st.raw.Close()
		}
		conn, err := net.Dial("unix", os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		st.raw = conn
		if err := wire.WriteFrame(conn, wire.EncodeHello(wire.Version)); err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		if _, err := wire.ReadFrame(conn, nil); err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		return reply{}
	case "raw": // request op A with Ints and Bufs
		st.tag++
		body, err := wire.AppendRequest(nil, &wire.Request{Tag: st.tag, Op: wire.Op(c.A), Ints: c.Ints, Bufs: c.Bufs})
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		if err := wire.WriteFrame(st.raw, body); err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		rb, err := wire.ReadFrame(st.raw, nil)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		resp, err := wire.DecodeResponse(rb)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		r := reply{Errno: int(resp.Errno), Ints: resp.Ints}
		if len(resp.Bufs) > 0 {
			r.Out = resp.Bufs[0]
		}
		if r.Errno != 0 {
			r.Err = keys.Errno(resp.Errno).Error()
		}
		return r
	case "listen": // listen at S as this uid; Out: the modes of socket and directory
		ln, err := server.Listen(c.S)
		if err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		defer ln.Close()
		sock, err1 := os.Stat(c.S)
		dir, err2 := os.Stat(filepath.Dir(c.S))
		if err := errors.Join(err1, err2); err != nil {
			return reply{Errno: -1, Err: err.Error()}
		}
		return reply{Out: []byte(fmt.Sprintf("%o %o", sock.Mode().Perm(), dir.Mode().Perm()))}
	}
	return runHog(c)
}
