package main

import (
	"bufio"
	"context"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/agent"
	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/intercept"
	"github.com/ukeys/ukeys/internal/certtest"
	"github.com/ukeys/ukeys/keyctl"
	"github.com/ukeys/ukeys/keys"
	"github.com/ukeys/ukeys/keys/bigkey"
	"github.com/ukeys/ukeys/server"
	"github.com/ukeys/ukeys/wire"
)

// The host uids of the scenario's processes; none needs an entry in
// /etc/passwd.
const (
	victimUID  = 1751 // the host user served throughout
	costlyUID  = 1752 // the CPU attacker (phase cpu)
	floodOwner = 1753 // owns the user namespace of the connection attacker (phase conns)
	// floodBase+1.. are floodOwner's subordinate uids, as /etc/subuid
	// would give them and newuidmap would map them.
	floodBase = 1_753_000
	spinUID   = 1754 // the spinning attacker (phase spin)
)

// The victims, in the order of the rows of each phase.
var tenantVictims = []string{"host-user", "container"}

// runTenants serves keys as ukeyd does (a Server with the default
// Limits for this process's descriptor limit, and a seccomp agent whose
// containers take their processes out of the host's bound and share its
// expensive operations), and measures two victims in one run: a host
// user (uid 1751, over the socket with the Go client) and a process of
// a container (its own pid and mount namespaces, its key calls
// intercepted and served by the agent's namespace for it), each reading
// a small user key of its own with a pause of p.IntervalUS between
// reads. Each phase lasts dur, with one attacker at one of its bounds:
//
//	idle    none;
//	cpu     uid 1752 on CostlyConns connections, each sending add_key of
//	        a P-521 certificate with a corrupted signature (finding 10);
//	conns   SubUIDs uids of a user namespace owned by uid 1753, each
//	        opening the per-uid bound's worth of connections and holding
//	        those accepted, then trying one more every RetryMS (11);
//	spin    uid 1754 on one version-3 connection that asks the daemon to
//	        poll, sending a request every SpinEveryUS (13);
//	bigkey  root of another container filling big_key files until
//	        refused, then trying one more every millisecond (3).
//
// Each victim also adds a big_key at the end of each phase, to show
// whether what the attacker holds is missed by others.
func runTenants(p tenantsParams, dur, interval time.Duration, prog *progress) (_ report, err error) {
	if os.Geteuid() != 0 {
		return report{}, errors.New("the tenants scenario needs root: its attackers and victims run as other uids, in containers and a user namespace")
	}
	if !intercept.Available() {
		return report{}, errors.New("the tenants scenario needs seccomp user notification (its containers' key calls are intercepted)")
	}
	unshare, err := exec.LookPath("unshare")
	if slices.Contains(p.Phases, "conns") && err != nil {
		return report{}, errors.New("the tenants scenario's conns phase needs unshare (util-linux) to make a user namespace as its owner")
	}
	dir, err := os.MkdirTemp("", "ukeybench-tenants-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	// Other uids reach the socket and run this program from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return report{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return report{}, err
	}
	exe := filepath.Join(dir, "ukeybench")
	if err := copyFile(self, exe, 0o755); err != nil {
		return report{}, err
	}

	// The daemon, wired as ukeyd wires it (cmd/ukeyd: the containers'
	// processes come out of the host's bound).
	lim := server.DefaultLimits(server.NoFile())
	// ukeyd reads them before it applies -procs: the expensive
	// operations' bound is one less than Go's count of processors.
	lim.MaxExpensive = max(p.GoProcs-1, 1)
	containers := agent.Bounds{Procs: max(lim.MaxProcs/2, 2)}
	lim.MaxProcs -= containers.Procs
	lim.MaxProcsPerUID = min(lim.MaxProcsPerUID, lim.MaxProcs)
	defer keys.SetBigKeyFileLimit(keys.SetBigKeyFileLimit(lim.BigKeyFiles))
	// Logged as ukeyd logs (its refusals within the throttle), where no
	// one reads it.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := keys.New()
	defer svc.Close()
	heavy := server.NewSlots(lim.MaxExpensive) // the daemon's, the containers' too
	srv := server.New(svc, server.Config{Logger: log, Limits: lim, Expensive: heavy})
	sock := filepath.Join(dir, "ukeyd.sock")
	ln, err := server.Listen(sock)
	if err != nil {
		return report{}, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ag := agent.New(agent.Config{Logger: log, Server: server.Config{Logger: log, Limits: lim, Expensive: heavy},
		Bounds: containers})
	agentSock := filepath.Join(dir, "agent.sock")
	aln, err := server.Listen(agentSock)
	if err != nil {
		srv.Shutdown(context.Background())
		<-served
		return report{}, err
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- ag.Serve(aln) }()

	e := &tenantsEnv{p: p, dir: dir, exe: exe, sock: sock, agentSock: agentSock, dur: dur, interval: interval,
		attempts: lim.MaxConnsPerUID}
	defer func() {
		e.endAll()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if e := ag.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
		<-agentDone
		if e := srv.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
		<-served
	}()

	prog.say("tenants: starting the victims")
	host, err := e.start("host user", exec.Command(exe), asUID(victimUID), "host-victim")
	if err != nil {
		return report{}, err
	}
	ctr, err := e.startContainer("container", "victim", "ctr-victim")
	if err != nil {
		return report{}, err
	}
	victims := []*kid{host, ctr}
	for _, v := range victims {
		if _, err := v.ready(time.Minute); err != nil {
			return report{}, err
		}
	}

	var rows []row
	var lines []string
	idleP99 := map[string]float64{}
	for _, ph := range p.Phases {
		prog.say(fmt.Sprintf("tenants %s: the attacker reaches its bound", ph))
		var att *kid
		switch ph {
		case "idle":
		case "cpu":
			att, err = e.start("cpu attacker", exec.Command(exe), asUID(costlyUID), "costly")
		case "conns":
			att, err = e.startFlood(unshare)
		case "spin":
			att, err = e.start("spinning attacker", exec.Command(exe), asUID(spinUID), "spin")
		case "bigkey":
			att, err = e.startContainer("big_key attacker", "tenant", "ctr-fill")
		default:
			err = fmt.Errorf("unknown phase %q: want some of %s", ph, strings.Join(tenantPhases, ", "))
		}
		if err != nil {
			return report{}, fmt.Errorf("phase %s: %w", ph, err)
		}
		var atBound string
		if att != nil {
			if atBound, err = att.ready(5 * time.Minute); err != nil {
				return report{}, fmt.Errorf("phase %s: %w", ph, err)
			}
		}
		prog.say(fmt.Sprintf("tenants %s: measuring for %v", ph, dur))
		held, bigOpen := srv.Stats(), keys.BigKeyFiles()
		cpu0, t0 := processCPU(), time.Now()
		for _, v := range victims {
			if err := v.say("measure"); err != nil {
				return report{}, err
			}
		}
		res := make([]victimResult, len(victims))
		for i, v := range victims {
			l, err := v.expect(dur + 2*time.Minute)
			if err == nil {
				err = json.Unmarshal([]byte(l), &res[i])
			}
			if err != nil {
				return report{}, fmt.Errorf("phase %s, %s: %w", ph, v.name, err)
			}
		}
		cpus := (processCPU() - cpu0).Seconds() / time.Since(t0).Seconds()
		bigs := make([]string, len(victims))
		for i, v := range victims {
			if err := v.say("bigkey"); err != nil {
				return report{}, err
			}
			if bigs[i], err = v.expect(time.Minute); err != nil {
				return report{}, err
			}
		}
		var attLine string
		if att != nil {
			held = srv.Stats()
			if attLine, err = att.end(time.Minute); err != nil {
				return report{}, fmt.Errorf("phase %s: %w", ph, err)
			}
		}
		for i, name := range tenantVictims {
			h := hdrhistogram.Import(res[i].Hist)
			r := histRow(ph, name, "us", h, 1e3)
			r.Extra = map[string]any{
				"ops_per_s":   float64(res[i].Calls) / dur.Seconds(),
				"errors":      float64(res[i].Errors),
				"daemon_cpus": cpus,
				"big_key_add": bigs[i],
			}
			if res[i].FirstError != "" {
				r.Extra["first_error"] = res[i].FirstError
			}
			if ph == "idle" {
				idleP99[name] = r.P99
			}
			if base := idleP99[name]; base > 0 {
				r.Extra["p99_vs_idle"] = r.P99 / base
			}
			rows = append(rows, r)
		}
		line := attackerLine(ph, p, held, bigOpen, atBound, attLine)
		for _, r := range rows[len(rows)-len(victims):] {
			r.Extra["attacker"] = line
		}
		lines = append(lines, line)
	}
	p.Limits, p.Containers = srv.Stats().Limits, ag.Bounds()
	p.Container, p.UIDInOne = agent.Share(p.Containers)
	rep := report{Scenario: "tenants", Params: p, Results: rows}
	rep.notes = []string{boundsNote(srv, ag, svc), summaryNote(rows), "The attackers:\n" + strings.Join(lines, "\n")}
	return rep, nil
}

// victimResult is what a victim says of one phase.
type victimResult struct {
	Calls      int64                  `json:"calls"`
	Errors     int64                  `json:"errors"`
	FirstError string                 `json:"first_error,omitempty"`
	Hist       *hdrhistogram.Snapshot `json:"hist"`
}

// processCPU is the CPU time this process (the daemon) has used.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// attackerLine says what the attacker of phase ph did, from its ready
// and final lines.
func attackerLine(ph string, p tenantsParams, held server.Stats, bigOpen int, atBound, final string) string {
	switch ph {
	case "idle":
		return "idle:   none"
	case "cpu":
		return fmt.Sprintf("cpu:    uid %d, %d connections of add_key(asymmetric, P-521 certificate with a corrupted signature): %s",
			costlyUID, p.CostlyConns, final)
	case "conns":
		return fmt.Sprintf("conns:  %d uids of a user namespace owned by uid %d; at its bound %s; the daemon held %d connections, %d processes; then retrying every %v ms: %s",
			p.SubUIDs, floodOwner, atBound, held.Conns, held.Procs, p.RetryMS, final)
	case "spin":
		return fmt.Sprintf("spin:   uid %d, one version-3 connection asking for the daemon's poll, a request every %v µs: %s",
			spinUID, p.SpinEveryUS, final)
	case "bigkey":
		return fmt.Sprintf("bigkey: root of container \"tenant\" filling big_key files: %s (the daemon's big_key files then: %d); then one more every ms: %s",
			atBound, bigOpen, final)
	}
	return ph + ": " + final
}

// boundsNote is the table of the bounds in force: the whole daemon's,
// a host user's share (the uids of a user namespace counted as its
// owner's), the containers' together, one container's and one uid's in
// a container.
func boundsNote(srv *server.Server, ag *agent.Agent, svc *keys.Service) string {
	l := srv.Stats().Limits
	b := ag.Bounds()
	c, u := agent.Share(b)
	t := svc.Tunables()
	var sb strings.Builder
	fmt.Fprintf(&sb, "Bounds in force (RLIMIT_NOFILE %d, GOMAXPROCS %d on %d processors); a user namespace's uids count as the user who owns it:\n",
		server.NoFile(), runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(&sb, "%-26s %14s %14s %16s %14s %14s\n", "bound", "whole daemon", "one host user", "all containers", "one container", "uid in one")
	row := func(name string, v ...string) {
		fmt.Fprintf(&sb, "%-26s %14s %14s %16s %14s %14s\n", name, v[0], v[1], v[2], v[3], v[4])
	}
	n := strconv.Itoa
	row("connections", n(l.MaxConns), n(l.MaxConnsPerUID), "-", "-", "-")
	row("processes (and listeners)", n(l.MaxProcs+b.Procs), n(l.MaxProcsPerUID), n(b.Procs), n(c.Procs), n(u.Procs))
	row("buffered bytes", n(l.MaxBuffered), n(l.MaxBufferedPerUID), "-", "-", "-")
	row("expensive operations", n(l.MaxExpensive), n(l.MaxExpensivePerUID), "(the daemon's)", "-", n(l.MaxExpensivePerUID))
	row("big_key files", n(l.BigKeyFiles), "(by its quota)", n(b.BigKeyFiles), n(c.BigKeyFiles), n(u.BigKeyFiles))
	row("keys", "-", n(t.MaxKeys), n(b.Keys), n(c.Keys), n(u.Keys))
	row("key bytes", "-", n(t.MaxBytes), n(b.Bytes), n(c.Bytes), n(u.Bytes))
	fmt.Fprintf(&sb, "(the host's processes are MaxProcs %d, the containers' %d taken out of the daemon's %d; root's own quota %d keys, %d bytes)",
		l.MaxProcs, b.Procs, l.MaxProcs+b.Procs, t.RootMaxKeys, t.RootMaxBytes)
	return sb.String()
}

// summaryNote is the table the issue asks for: per phase and victim,
// p50/p99/p99.9 and p99 against the idle run's.
func summaryNote(rows []row) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-7s %-10s %9s %9s %9s %9s %8s %9s %-12s\n", "phase", "victim", "p50 µs", "p99 µs", "p99.9 µs", "p99/idle", "errors", "daemon", "big_key add")
	for _, r := range rows {
		ratio := "-"
		if v, ok := r.Extra["p99_vs_idle"].(float64); ok {
			ratio = strconv.FormatFloat(v, 'f', 2, 64)
		}
		fmt.Fprintf(&sb, "%-7s %-10s %9s %9s %9s %9s %8s %9s %-12s\n", r.Case, r.Variant, fmtFig(r.P50), fmtFig(r.P99), fmtFig(r.P999),
			ratio, fmtNum(r.Extra["errors"]), fmtFig(r.Extra["daemon_cpus"].(float64))+" CPU", r.Extra["big_key_add"])
	}
	return strings.TrimRight(sb.String(), "\n")
}

// asUID returns the attributes that start a process as uid (and gid the
// same) with no supplementary groups, as ukeystest.As does: a child of
// root would otherwise keep root's groups.
func asUID(uid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// tenantsEnv is what the scenario's processes are started with.
type tenantsEnv struct {
	p                         tenantsParams
	dir, exe, sock, agentSock string
	dur, interval             time.Duration
	attempts                  int // connections each uid of the flood tries: the per-uid bound
	mu                        sync.Mutex
	kids                      []*kid
}

// env is the environment of a process of role, nothing of this one's
// (but GORACE: a child built with the race detector would otherwise
// sleep a second as it exits).
func (e *tenantsEnv) env(role string, more ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), tenantEnv + "=" + role, "UKEYS_SOCKET=" + e.sock,
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
		"UKEYBENCH_DURATION=" + e.dur.String(), "UKEYBENCH_INTERVAL=" + e.interval.String(),
		"UKEYBENCH_CONNS=" + strconv.Itoa(e.p.CostlyConns),
		"UKEYBENCH_SPIN_EVERY=" + time.Duration(e.p.SpinEveryUS*1e3).String(),
		"UKEYBENCH_RETRY=" + time.Duration(e.p.RetryMS*1e6).String(),
		"UKEYBENCH_ATTEMPTS=" + strconv.Itoa(e.attempts)}, more...)
}

// start starts cmd as a process of role with attrs.
func (e *tenantsEnv) start(name string, cmd *exec.Cmd, attrs *syscall.SysProcAttr, role string, more ...string) (*kid, error) {
	cmd.SysProcAttr = attrs
	cmd.Env = e.env(role, more...)
	k, err := startKid(name, cmd)
	if err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	e.mu.Lock()
	e.kids = append(e.kids, k)
	e.mu.Unlock()
	return k, nil
}

// startContainer starts a process of role as the init of a new
// container id (its own pid and mount namespaces), under the filter,
// and hands its listener to the agent as runc does.
func (e *tenantsEnv) startContainer(name, id, role string) (*kid, error) {
	cmd := exec.Command(e.exe)
	var k *kid
	ours, err := startHandingOff(cmd, func() (err error) {
		k, err = e.start(name, cmd, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}, role)
		return err
	})
	if err != nil {
		return nil, err
	}
	k.ours = ours
	if err := handToAgent(e.agentSock, id, cmd.Process.Pid, int(ours.Fd())); err != nil {
		return nil, fmt.Errorf("the %s: %w %s", name, err, k.stderr.String())
	}
	return k, nil
}

// startFlood starts the connection attacker: unshare makes a user
// namespace as floodOwner, whose map root writes from outside as the
// setuid newuidmap would from /etc/subuid (0 is the owner, 1..SubUIDs
// its subordinate uids).
func (e *tenantsEnv) startFlood(unshare string) (*kid, error) {
	k, err := e.start("connection attacker", exec.Command(unshare, "--user", "--", e.exe), asUID(floodOwner), "flood-enter",
		"UKEYBENCH_SUBUIDS="+strconv.Itoa(e.p.SubUIDs))
	if err != nil {
		return nil, err
	}
	if l, err := k.expect(time.Minute); err != nil || l != "in namespace" {
		return nil, fmt.Errorf("the connection attacker did not enter its namespace: %q %v", l, err)
	}
	idMap := fmt.Sprintf("0 %d 1\n1 %d %d\n", floodOwner, floodBase+1, e.p.SubUIDs)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", k.cmd.Process.Pid, f), []byte(idMap), 0); err != nil {
			return nil, fmt.Errorf("writing the namespace's %s: %w", f, err)
		}
	}
	return k, k.say("go")
}

// endAll ends every process still running.
func (e *tenantsEnv) endAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range e.kids {
		k.end(10 * time.Second)
	}
}

// kid is a process of the scenario, spoken to a line at a time.
type kid struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *lockedBuf
	ours   *os.File // a container's end of its hand-off socket
	ended  bool
	last   string
	err    error
}

func startKid(name string, cmd *exec.Cmd) (*kid, error) {
	k := &kid{name: name, cmd: cmd, lines: make(chan string, 16), stderr: &lockedBuf{}}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	k.in = in
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, k.stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	go func() {
		defer close(k.lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 16<<20) // a histogram's snapshot
		for sc.Scan() {
			k.lines <- sc.Text()
		}
	}()
	return k, nil
}

func (k *kid) say(s string) error {
	if _, err := io.WriteString(k.in, s+"\n"); err != nil {
		return fmt.Errorf("the %s: %w %s", k.name, err, k.stderr.String())
	}
	return nil
}

// expect returns the process's next line.
func (k *kid) expect(d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l, ok := <-k.lines:
		if !ok {
			return "", fmt.Errorf("the %s ended: %s", k.name, strings.TrimSpace(k.stderr.String()))
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("the %s said nothing within %v: %s", k.name, d, strings.TrimSpace(k.stderr.String()))
	}
}

// ready waits for the process's "ready" line, and returns what follows
// the word.
func (k *kid) ready(d time.Duration) (string, error) {
	l, err := k.expect(d)
	if err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(l, "ready")
	if !ok {
		return "", fmt.Errorf("the %s said %q: %s", k.name, l, strings.TrimSpace(k.stderr.String()))
	}
	return strings.TrimSpace(rest), nil
}

// end closes the process's input, which tells it to stop, and returns
// its last line; it is killed if it has not ended within d.
func (k *kid) end(d time.Duration) (string, error) {
	if k.ended {
		return k.last, k.err
	}
	k.ended = true
	k.in.Close()
	t := time.NewTimer(d)
	defer t.Stop()
	killed := false
	for done := false; !done; {
		select {
		case l, ok := <-k.lines:
			if !ok {
				done = true
			} else {
				k.last = l
			}
		case <-t.C:
			k.cmd.Process.Kill()
			killed = true
		}
	}
	werr := k.cmd.Wait()
	if k.ours != nil {
		k.ours.Close()
	}
	switch {
	case killed:
		k.err = fmt.Errorf("the %s did not end within %v", k.name, d)
	case werr != nil:
		k.err = fmt.Errorf("the %s: %w %s", k.name, werr, strings.TrimSpace(k.stderr.String()))
	}
	return k.last, k.err
}

// lockedBuf collects what a process writes on its standard error.
type lockedBuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b) < 64<<10 {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// The scenario's processes (tenantChild's roles).

// tenantChild is one of the scenario's processes.
func tenantChild(role string) int {
	var err error
	switch role {
	case "host-victim":
		err = hostVictim()
	case "ctr-victim":
		err = containerVictim()
	case "costly":
		err = costlyAttacker()
	case "flood-enter":
		err = floodEnter()
	case "flood":
		err = flood()
	case "flood-uid":
		err = floodUID()
	case "spin":
		err = spinAttacker()
	case "ctr-fill":
		err = containerFill()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}

// bigPayload is a big_key payload kept in a file.
var bigPayload = make([]byte, 2*bigkey.Inline)

// victim runs a victim's side: "measure" reads for the phase's duration,
// pausing UKEYBENCH_INTERVAL between reads, and says how it went;
// "bigkey" adds (or replaces) a big_key and says "ok" or why not.
func victim(read func() error, addBig func() error) error {
	dur, interval := envDuration("UKEYBENCH_DURATION"), envDuration("UKEYBENCH_INTERVAL")
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		switch sc.Text() {
		case "measure":
			h := newHist()
			var res victimResult
			for end := time.Now().Add(dur); time.Now().Before(end); res.Calls++ {
				t0 := time.Now()
				if err := read(); err != nil {
					if res.Errors++; res.FirstError == "" {
						res.FirstError = err.Error()
					}
				} else {
					record(h, time.Since(t0))
				}
				if interval > 0 {
					time.Sleep(interval)
				}
			}
			res.Hist = h.Export()
			if err := enc.Encode(res); err != nil {
				return err
			}
		case "bigkey":
			if err := addBig(); err != nil {
				fmt.Println(errName(err))
			} else {
				fmt.Println("ok")
			}
		}
	}
	return sc.Err()
}

// errName is an error's errno name where it has one.
func errName(err error) string {
	var e syscall.Errno
	var ke keyctl.Errno
	switch {
	case errors.As(err, &e):
		return unix.ErrnoName(e)
	case errors.As(err, &ke):
		return unix.ErrnoName(syscall.Errno(ke))
	}
	return err.Error()
}

// hostVictim is the host user: it reads a key of its own over the
// socket.
func hostVictim() error {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
	if err != nil {
		return err
	}
	defer c.Close()
	id, err := c.AddKey("user", "victim", []byte("0123456789abcdef"), keyctl.UserKeyring)
	if err != nil {
		return err
	}
	return victim(func() error { _, err := c.Read(id); return err },
		func() error {
			_, err := c.AddKey("big_key", "victim-big", bigPayload, keyctl.UserKeyring)
			return err
		})
}

// containerVictim is a process of the container "victim": its key calls
// go to the kernel's interface, intercepted and served by the agent.
func containerVictim() error {
	// The filter is the thread's: the calls must come from it.
	runtime.LockOSThread()
	if err := intercept.HandOff(3, false); err != nil {
		return err
	}
	id, err := unix.AddKey("user", "victim", []byte("0123456789abcdef"), int(keyctl.UserKeyring))
	if err != nil {
		return fmt.Errorf("add_key: %w", err)
	}
	buf := make([]byte, 64)
	return victim(func() error { _, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0); return err },
		func() error {
			_, err := unix.AddKey("big_key", "victim-big", bigPayload, int(keyctl.UserKeyring))
			return err
		})
}

// untilEOF returns a flag set once standard input ends: the word to
// stop.
func untilEOF() *atomic.Bool {
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	return &stop
}

// errnoCounts counts errors by name.
type errnoCounts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *errnoCounts) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[errName(err)]++
}

// dieTB is certtest's TB for a program: it stops at the first error.
type dieTB struct{}

func (dieTB) Helper() {}
func (dieTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}

// costlyAttacker sends add_key of a P-521 certificate whose signature is
// corrupted (refused with EKEYREJECTED after the check, no quota used)
// on UKEYBENCH_CONNS connections, as fast as each is answered.
func costlyAttacker() error {
	cert := certtest.New(dieTB{}, certtest.Options{CN: "flood", Curve: elliptic.P521()}, nil)
	bad := append([]byte(nil), cert.DER...)
	bad[len(bad)-1] ^= 0x55 // in the signature's last number
	n, _ := strconv.Atoi(os.Getenv("UKEYBENCH_CONNS"))
	conns := make([]*client.Client, max(n, 1))
	for i := range conns {
		c, err := client.Dial(os.Getenv("UKEYS_SOCKET"))
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i] = c
	}
	fmt.Println("ready")
	cpu0 := processCPU()
	stop := untilEOF()
	var calls atomic.Int64
	var errs errnoCounts
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for !stop.Load() {
				_, err := c.AddKey("asymmetric", "", bad, keyctl.UserKeyring)
				calls.Add(1)
				errs.add(err)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"calls": calls.Load(), "per_s": int(float64(calls.Load()) / el.Seconds()),
		"answers": errs.m, "attacker_cpu_s": math.Round((processCPU()-cpu0).Seconds()*1e3) / 1e3})
}

// spinAttacker asks the daemon to poll for its requests (version 3,
// [client.WithSpin]) and sends one every UKEYBENCH_SPIN_EVERY.
func spinAttacker() error {
	c, err := client.Dial(os.Getenv("UKEYS_SOCKET"), client.WithSpin(client.DefaultSpin))
	if err != nil {
		return err
	}
	defer c.Close()
	id, err := c.AddKey("user", "spin", []byte("x"), keyctl.UserKeyring)
	if err != nil {
		return err
	}
	every := envDuration("UKEYBENCH_SPIN_EVERY")
	fmt.Println("ready")
	cpu0 := processCPU()
	stop := untilEOF()
	var calls, failed int64
	start := time.Now()
	for next := start; !stop.Load(); calls++ {
		if _, err := c.Read(id); err != nil {
			failed++
		}
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now()
		}
	}
	el := time.Since(start)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"calls": calls, "per_s": int(float64(calls) / el.Seconds()),
		"failed": failed, "attacker_cpu_s": math.Round((processCPU()-cpu0).Seconds()*1e3) / 1e3})
}

// floodEnter runs in the namespace unshare made, before its map is
// written: it says so, waits for the map, and runs this program again as
// the namespace's uid 0, with its capabilities.
func floodEnter() error {
	fmt.Println("in namespace")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || line != "go\n" {
		return fmt.Errorf("no word to go: %q %v", line, err)
	}
	env := slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, tenantEnv+"=") })
	return syscall.Exec("/proc/self/exe", os.Args[:1], append(env, tenantEnv+"=flood"))
}

// floodTally is what the uids of the flood did.
type floodTally struct {
	Accepted int64            `json:"accepted,omitempty"`
	Refused  map[string]int64 `json:"refused,omitempty"`
	Retries  int64            `json:"retries,omitempty"`
	// CPUSeconds: the uids' processes' CPU time while retrying.
	CPUSeconds float64 `json:"attacker_cpu_s,omitempty"`
	// RetriesAccepted: attempts past the bound that were accepted (none,
	// when the bound holds).
	RetriesAccepted int64 `json:"retries_accepted,omitempty"`
}

func (t *floodTally) add(o floodTally) {
	t.Accepted += o.Accepted
	t.Retries += o.Retries
	t.CPUSeconds += o.CPUSeconds
	t.RetriesAccepted += o.RetriesAccepted
	for k, v := range o.Refused {
		if t.Refused == nil {
			t.Refused = map[string]int64{}
		}
		t.Refused[k] += v
	}
}

// flood starts a process as each mapped uid of the namespace, all at
// once; each connects the per-uid bound's worth of times and holds what
// it got. It says "ready" with their tally once all are done, and their
// final tally once its input ends.
func flood() error {
	n, _ := strconv.Atoi(os.Getenv("UKEYBENCH_SUBUIDS"))
	type uidProc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	var procs []uidProc
	for uid := 1; uid <= n; uid++ {
		cmd := exec.Command("/proc/self/exe")
		env := slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, tenantEnv+"=") })
		cmd.Env = append(env, tenantEnv+"=flood-uid")
		cmd.SysProcAttr = asUID(uint32(uid))
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, uidProc{cmd, in, bufio.NewReader(out)})
	}
	tally := func() (floodTally, error) {
		var t floodTally
		for _, p := range procs {
			line, err := p.out.ReadString('\n')
			if err != nil {
				return t, fmt.Errorf("a uid of the namespace: %w", err)
			}
			var o floodTally
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				return t, fmt.Errorf("a uid of the namespace said %q", line)
			}
			t.add(o)
		}
		return t, nil
	}
	t, err := tally()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(t)
	fmt.Printf("ready %s\n", b)
	io.Copy(io.Discard, os.Stdin)
	// Every uid stops trying before any lets go of what it holds: one
	// that let go first would make room for another's last attempts.
	for _, p := range procs {
		io.WriteString(p.in, "stop\n")
	}
	t, err = tally()
	for _, p := range procs {
		p.in.Close()
		p.cmd.Wait()
	}
	if err != nil {
		return err
	}
	t.CPUSeconds = math.Round(t.CPUSeconds*1e3) / 1e3
	return json.NewEncoder(os.Stdout).Encode(t)
}

// dialHello connects and reads the daemon's hello, or its refusal.
func dialHello(path string) (net.Conn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	// A refusal may be written, and the connection closed, before the
	// hello is sent: it is read all the same.
	wire.WriteFrame(c, wire.EncodeHello(wire.Version))
	var b []byte
	if b, err = wire.ReadFrame(c, nil); err == nil {
		_, err = wire.DecodeHello(b)
	}
	if err != nil {
		c.Close()
		var refused *wire.Refused
		if errors.As(err, &refused) {
			return nil, syscall.Errno(refused.Errno)
		}
		return nil, err
	}
	return c, nil
}

// floodUID is one uid of the namespace: it connects as many times as
// the per-uid bound allows (UKEYBENCH_ATTEMPTS), holding those accepted,
// says how it went, then tries once more every UKEYBENCH_RETRY until its
// input says "stop", says how that went, and lets go of its connections
// once its input ends.
func floodUID() error {
	path := os.Getenv("UKEYS_SOCKET")
	retry := envDuration("UKEYBENCH_RETRY")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var t floodTally
	var refused errnoCounts
	n, _ := strconv.Atoi(os.Getenv("UKEYBENCH_ATTEMPTS"))
	for range n {
		c, err := dialHello(path)
		if err != nil {
			refused.add(err)
			continue
		}
		held = append(held, c)
		t.Accepted++
	}
	t.Refused = refused.m
	if err := json.NewEncoder(os.Stdout).Encode(t); err != nil {
		return err
	}
	var stop atomic.Bool
	eof := make(chan struct{})
	go func() {
		in := bufio.NewReader(os.Stdin)
		in.ReadString('\n')
		stop.Store(true)
		io.Copy(io.Discard, in)
		close(eof)
	}()
	t = floodTally{}
	refused = errnoCounts{}
	cpu0 := processCPU()
	for !stop.Load() {
		time.Sleep(retry)
		t.Retries++
		c, err := dialHello(path)
		if err != nil {
			refused.add(err)
			continue
		}
		held = append(held, c)
		t.RetriesAccepted++
	}
	t.Refused = refused.m
	t.CPUSeconds = math.Round((processCPU()-cpu0).Seconds()*1e3) / 1e3
	if err := json.NewEncoder(os.Stdout).Encode(t); err != nil {
		return err
	}
	<-eof
	return nil
}

// containerFill is root of the container "tenant": it adds big_keys in
// its user keyring until refused, says how many and why, then tries one
// more every millisecond until its input ends.
func containerFill() error {
	runtime.LockOSThread()
	if err := intercept.HandOff(3, false); err != nil {
		return err
	}
	n := 0
	var why error
	for ; n < 1_000_000; n++ {
		if _, why = unix.AddKey("big_key", "fill-"+strconv.Itoa(n), bigPayload, int(keyctl.UserKeyring)); why != nil {
			break
		}
	}
	if why == nil {
		return fmt.Errorf("%d big_keys added, none refused", n)
	}
	b, _ := json.Marshal(map[string]any{"files": n, "refused": errName(why)})
	fmt.Printf("ready %s\n", b)
	cpu0 := processCPU()
	stop := untilEOF()
	var errs errnoCounts
	var tries, added int64
	for i := n; !stop.Load(); i++ {
		time.Sleep(time.Millisecond)
		tries++
		if _, err := unix.AddKey("big_key", "fill-"+strconv.Itoa(i), bigPayload, int(keyctl.UserKeyring)); err != nil {
			errs.add(err)
		} else {
			added++
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"tries": tries, "added": added, "answers": errs.m,
		"attacker_cpu_s": math.Round((processCPU()-cpu0).Seconds()*1e3) / 1e3})
}
