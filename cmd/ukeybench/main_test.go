package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(syscallChild(v)) // a caller of the syscall scenario
	}
	if v := os.Getenv(handoverEnv); v != "" {
		os.Exit(handoverDaemonMain(v)) // a daemon of the handover scenario
	}
	if v := os.Getenv(tenantEnv); v != "" {
		os.Exit(tenantChild(v)) // a victim or attacker of the tenants scenario
	}
	if os.Getenv(idleEnv) != "" {
		os.Exit(idleContainer()) // an idle container of the namespaces scenario
	}
	goleak.VerifyTestMain(m,
		// golang-lru's expirable LRU never stops its cleaner goroutine (its
		// done channel is never closed); nothing outside the library can.
		goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"),
	)
}

// runJSON runs ukeybench with args and -json and decodes its report.
func runJSON(t *testing.T, args ...string) report {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"-json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	// Every object has exactly the documented keys.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil || len(raw) != 3 || raw["params"] == nil {
		t.Fatalf("top-level keys: %v (%v)", keysOf(raw), err)
	}
	var rows struct{ Results []map[string]json.RawMessage }
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows.Results {
		for _, k := range []string{"case", "variant", "unit", "n", "min", "avg", "max", "var", "p50", "p99", "p999", "extra"} {
			if _, ok := r[k]; !ok {
				t.Errorf("row %s lacks %q", r["case"], k)
			}
		}
		if len(r) != 12 {
			t.Errorf("row has keys %v, want the 12 documented", keysOf(r))
		}
	}
	return rep
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// checkRows checks that rep has one row per case and variant, in unit,
// with consistent figures and the named extras.
func checkRows(t *testing.T, rep report, scenario string, cases, variants []string, unit string, extras ...string) map[string]row {
	t.Helper()
	if rep.Scenario != scenario {
		t.Fatalf("scenario %q, want %q", rep.Scenario, scenario)
	}
	if len(rep.Results) != len(cases)*len(variants) {
		t.Errorf("%d rows, want %d", len(rep.Results), len(cases)*len(variants))
	}
	byName := map[string]row{}
	for _, r := range rep.Results {
		byName[r.Case+"/"+r.Variant] = r
		if r.Unit != unit {
			t.Errorf("row %s/%s: unit %q, want %q", r.Case, r.Variant, r.Unit, unit)
		}
		if r.N == 0 || r.Min > r.P50 || r.P50 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max || r.Avg < r.Min || r.Avg > r.Max || r.Var < 0 {
			t.Errorf("row %s/%s inconsistent: %+v", r.Case, r.Variant, r)
		}
		for _, k := range extras {
			if _, ok := r.Extra[k]; !ok {
				t.Errorf("row %s/%s lacks extra %s", r.Case, r.Variant, k)
			}
		}
	}
	for _, c := range cases {
		for _, v := range variants {
			if _, ok := byName[c+"/"+v]; !ok {
				t.Errorf("missing row %s/%s", c, v)
			}
		}
	}
	return byName
}

func TestGPQuickShape(t *testing.T) {
	rep := runJSON(t, "-quick", "-trials", "2", "gp")
	rows := checkRows(t, rep, "gp", []string{"holdout"}, []string{"poll-1s", "poll-backoff", "synchronize"}, "ms",
		"holdout_p50_ms", "overshoot_p50_ms")
	// The one-second poller sleeps a second before it looks again, and it
	// first looks before the holdout is released, so the holdout cannot
	// have reported yet: a lower bound, not a speed limit. (CI once saw
	// 0.7 ms here when the first look came after the release and the
	// poller was descheduled for longer than the holdout's delay.)
	if r := rows["holdout/poll-1s"]; r.N != 2 || r.Min < 999 {
		t.Errorf("poll-1s: %d trials, fastest %v ms; want 2 trials of at least a second", r.N, r.Min)
	}
	if r := rows["holdout/synchronize"]; r.N != 20 {
		t.Errorf("synchronize: %d trials, want 20", r.N)
	}
}

func TestStallQuickShape(t *testing.T) {
	rep := runJSON(t, "-quick", "-loop", "300ms", "-rounds", "1", "-stall-timeout", "20ms", "stall")
	rows := checkRows(t, rep, "stall", []string{"long-loop"}, []string{"gosched", "checkpoint"}, "ms",
		"stall_reports", "max_between_checkpoints_ms")
	// A loop that only yields never reports a quiescent state: the grace
	// period lasts as long as the loop's remainder and is reported, with
	// the task's name and stack.
	g := rows["long-loop/gosched"]
	if g.Max < 150 {
		t.Errorf("gosched: longest grace period %v ms during a 300 ms loop that never reports", g.Max)
	}
	if n, _ := g.Extra["stall_reports"].(float64); n < 1 {
		t.Errorf("gosched: %v stall reports, want at least one", g.Extra["stall_reports"])
	}
	if s, _ := g.Extra["stall_report"].(string); !strings.Contains(s, `task "long-loop"`) || !strings.Contains(s, "runStall") {
		t.Errorf("gosched: stall report does not name the task and its stack:\n%s", s)
	}
	if c := rows["long-loop/checkpoint"]; c.N < 2 {
		t.Errorf("checkpoint: %d grace periods during the loop, want many", c.N)
	}
}

func TestReadQuickShape(t *testing.T) {
	dir := t.TempDir()
	rep := runJSON(t, "-quick", "-duration", "20ms", "-plot", dir, "read")
	var cases []string
	for g := 1; g <= runtime.GOMAXPROCS(0); g++ {
		cases = append(cases, "goroutines-"+string(rune('0'+g%10)))
	}
	if runtime.GOMAXPROCS(0) >= 10 {
		cases = nil // names past 9 are checked by count only
		for _, r := range rep.Results {
			if !contains(cases, r.Case) {
				cases = append(cases, r.Case)
			}
		}
	}
	checkRows(t, rep, "read", cases, []string{"rcu-read", "checkpoint", "rwmutex", "atomic-pointer", "keys-lookup"}, "ns",
		"ns_per_op", "mops_per_s", "ops")
	for _, f := range []string{"read-goroutines-1-cdf.svg", "read-goroutines-1-cdf.png", "read-ns-per-op.svg", "read-ns-per-op.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
}

func TestExpiryQuickShape(t *testing.T) {
	rep := runJSON(t, "-quick", "-entries", "2000", "-window", "1s", "expiry")
	rows := checkRows(t, rep, "expiry", []string{"mass-expiry"},
		[]string{"ukeys", "go-cache", "ttlcache", "otter", "ristretto", "golang-lru", "baseline"}, "us",
		"stall_ms", "reap_done_ms", "stored", "reaped")
	// The keys package must really have reaped the expired keys: the
	// collector is asked for a pass at the expiry, and the window lasts
	// until it is done or a second has gone.
	u := rows["mass-expiry/ukeys"]
	if u.Extra["stored"].(float64) != 2000 || u.Extra["reaped"].(float64) > 2000 {
		t.Errorf("ukeys: stored %v, reaped %v of 2000", u.Extra["stored"], u.Extra["reaped"])
	}
}

func TestDaemonQuickShape(t *testing.T) {
	rep := runJSON(t, "-quick", "-clients", "1,3", "-duration", "100ms", "-garbage", "3000", "daemon")
	rows := checkRows(t, rep, "daemon", []string{"clients-1", "clients-3"}, []string{"idle", "gc-busy"}, "us",
		"ops_per_s", "reap_s", "destroyed")
	for _, c := range []string{"clients-1", "clients-3"} {
		if d := rows[c+"/idle"].Extra["destroyed"].(float64); d != 0 {
			t.Errorf("%s/idle: the collector destroyed %v keys, want none", c, d)
		}
	}
}

// A hand-over of a few thousand keys under four readers: every read
// succeeds, and the figures are there.
func TestHandoverQuickShape(t *testing.T) {
	rep := runJSON(t, "-quick", "-keys", "5000", "-keyrings", "10", "-readers", "4", "-duration", "100ms", "handover")
	rows := checkRows(t, rep, "handover", []string{"keys-5000"}, []string{"clients-4"}, "us",
		"serving_s", "takeover_s", "longest_pause_ms", "errors", "old_peak_rss_mib", "new_peak_rss_mib")
	r := rows["keys-5000/clients-4"]
	if r.Extra["errors"].(float64) != 0 || r.Extra["keys_handed_over"] == "0" || r.Extra["old_exited_status"].(float64) != 0 {
		t.Fatalf("the hand-over: %v", r.Extra)
	}
}

func TestSyscallQuickShape(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the syscall scenario needs Linux")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-json", "-quick", "-callers", "1,2", "-duration", "100ms", "syscall"}, &out, &errb); code != 0 {
		if strings.Contains(errb.String(), "seccomp") || strings.Contains(errb.String(), "kernel keyrings") {
			t.Skipf("no interception or no kernel keyrings here: %s", errb.String())
		}
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	variants := []string{"kernel", "intercepted", "socket"}
	if _, err := exec.LookPath("cc"); err == nil {
		// The floor, the C supervisor, is measured where there is a C
		// compiler, and each intercepted row says how far it is.
		variants = append(variants, "floor")
	}
	rows := checkRows(t, rep, "syscall", []string{"callers-1", "callers-2"}, variants, "us", "calls_per_s")
	if len(variants) == 4 {
		for _, c := range []string{"callers-1", "callers-2"} {
			r := rows[c+"/intercepted"]
			if x, ok := r.Extra["p50_x_floor"].(float64); !ok || x <= 0 {
				t.Errorf("%s/intercepted: p50_x_floor %v", c, r.Extra["p50_x_floor"])
			}
		}
	}
}

// -variants runs those named alone; with no C compiler on PATH, the floor
// is left out with a note saying why, and the rest still runs.
func TestSyscallVariants(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the syscall scenario needs Linux")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-json", "-quick", "-callers", "1", "-duration", "50ms", "-variants", "kernel", "syscall"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	checkRows(t, rep, "syscall", []string{"callers-1"}, []string{"kernel"}, "us", "calls_per_s")
	t.Setenv("PATH", t.TempDir())
	out.Reset()
	errb.Reset()
	if code := run([]string{"-quick", "-callers", "1", "-duration", "50ms", "-variants", "floor,kernel", "syscall"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "floor not measured: no C compiler (cc) on PATH") || strings.Contains(out.String(), " floor ") {
		t.Errorf("without cc:\n%s", out.String())
	}
}

func TestTableAndMarkdown(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-quick", "-duration", "5ms", "read"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "scenario read\n") || !strings.Contains(out.String(), "(ns, n=") {
		t.Errorf("table:\n%s", out.String())
	}
	if !strings.Contains(errb.String(), "ukeybench: read [") {
		t.Errorf("no progress on stderr:\n%s", errb.String())
	}
	// read measures with Go's processors unless told; the run says so.
	if want := fmt.Sprintf("GOMAXPROCS %d (-procs go)", runtime.GOMAXPROCS(0)); !strings.Contains(out.String(), want) {
		t.Errorf("table does not say %q:\n%s", want, out.String())
	}
	// Where the host says how it gives huge pages, the table says it too.
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		_, rest, _ := strings.Cut(string(b), "[")
		mode, _, _ := strings.Cut(rest, "]")
		if want := "transparent huge pages: " + mode + "."; mode == "" || !strings.Contains(out.String(), want) {
			t.Errorf("table does not say %q (the host: %q):\n%s", want, b, out.String())
		}
	}
	if code := run([]string{"-quick", "-procs", "0", "read"}, &out, &errb); code != 2 {
		t.Errorf("-procs 0: exit %d, want 2", code)
	}
	out.Reset()
	if code := run([]string{"-quick", "-markdown", "-duration", "5ms", "read"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6+5*runtime.GOMAXPROCS(0) || !strings.HasPrefix(lines[0], "Load average") ||
		!strings.HasPrefix(lines[2], "Parameters: `{") || !strings.HasPrefix(lines[4], "| case | variant | unit |") {
		t.Errorf("markdown:\n%s", out.String())
	}
}

// The suite runs the gc scenario small and checks the output's shape,
// never its timings.
func TestGCQuickJSONShape(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-quick", "-json", "-keys", "3000", "-chunk", "256", "gc"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if rep.Scenario != "gc" || len(rep.Results) != 12 {
		t.Fatalf("scenario %q with %d rows, want gc with 12", rep.Scenario, len(rep.Results))
	}
	seen := map[string]bool{}
	byName := map[string]row{}
	for _, r := range rep.Results {
		seen[r.Case+"/"+r.Variant] = true
		byName[r.Case+"/"+r.Variant] = r
		if r.Unit != "us" || r.N == 0 || r.Min > r.P50 || r.P50 > r.P999 || r.P999 > r.Max {
			t.Errorf("row %s/%s inconsistent: %+v", r.Case, r.Variant, r)
		}
		for _, k := range []string{"max_work_item_ms", "p999_work_item_ms", "reap_all_s", "minor_faults"} {
			if _, ok := r.Extra[k]; !ok {
				t.Errorf("row %s/%s lacks extra %s", r.Case, r.Variant, k)
			}
		}
		if r.Variant == "chunked" {
			if got := r.Extra["max_scanned_per_item"].(float64); got > 256 {
				t.Errorf("%s/chunked: a work item scanned %v keys, chunk 256", r.Case, got)
			}
		}
	}
	for _, c := range []string{"unused", "expired", "combined", "mixed"} {
		for _, v := range []string{"chunked", "unchunked", "baseline"} {
			if !seen[c+"/"+v] {
				t.Errorf("missing row %s/%s", c, v)
			}
		}
	}
	// combined is keygcbench's: the unused and expired samples pooled.
	for _, v := range []string{"chunked", "unchunked", "baseline"} {
		u, e, c := byName["unused/"+v], byName["expired/"+v], byName["combined/"+v]
		if c.N != u.N+e.N || c.Min != min(u.Min, e.Min) || c.Max != max(u.Max, e.Max) ||
			c.Avg < min(u.Avg, e.Avg) || c.Avg > max(u.Avg, e.Avg) {
			t.Errorf("combined/%s is not unused and expired pooled:\n%+v\n%+v\n%+v", v, c, u, e)
		}
		for _, k := range []string{"max_queue_wait_ms", "reap_all_s"} {
			if c.Extra[k] != max(u.Extra[k].(float64), e.Extra[k].(float64)) {
				t.Errorf("combined/%s %s = %v, want the larger of %v and %v", v, k, c.Extra[k], u.Extra[k], e.Extra[k])
			}
		}
		for _, k := range []string{"items", "minor_faults"} {
			if c.Extra[k] != u.Extra[k].(float64)+e.Extra[k].(float64) {
				t.Errorf("combined/%s %s = %v, want the sum of %v and %v", v, k, c.Extra[k], u.Extra[k], e.Extra[k])
			}
		}
	}
	// mixed's reap counts the benchmark's own unlinks; the part after
	// them is reported apart.
	if m := byName["mixed/chunked"]; m.Extra["make_garbage_s"].(float64) <= 0 ||
		m.Extra["reap_after_made_s"].(float64) > m.Extra["reap_all_s"].(float64) {
		t.Errorf("mixed/chunked: made in %v, reaped %v after, %v in all",
			m.Extra["make_garbage_s"], m.Extra["reap_after_made_s"], m.Extra["reap_all_s"])
	}
}

// -chunks sweeps the chunk budget: each case chunked once per size, then
// its baseline; each size's items stay within its budget.
func TestGCChunkSweepShape(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-quick", "-json", "-keys", "2000", "-chunks", "64,512", "gc"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	var got []string
	for _, r := range rep.Results {
		got = append(got, r.Case+"/"+r.Variant)
		budget := map[string]float64{"chunked-64": 64, "chunked-512": 512}[r.Variant]
		if scanned, _ := r.Extra["max_scanned_per_item"].(float64); budget > 0 && scanned > budget {
			t.Errorf("%s/%s: a work item scanned %v keys", r.Case, r.Variant, scanned)
		}
	}
	want := "unused/chunked-64 unused/chunked-512 unused/baseline expired/chunked-64 expired/chunked-512 expired/baseline " +
		"combined/chunked-64 combined/chunked-512 combined/baseline mixed/chunked-64 mixed/chunked-512 mixed/baseline"
	if strings.Join(got, " ") != want {
		t.Fatalf("rows %v, want %s", got, want)
	}
	if code := run([]string{"-quick", "-chunks", "64,0", "gc"}, &out, &errb); code != 1 {
		t.Fatalf("a chunk size of 0 in the sweep: exit %d, want 1", code)
	}
}

// -cases runs a subset of the gc cases; combined comes only with both
// of the cases it pools, and an unknown case is refused.
func TestGCCases(t *testing.T) {
	for _, tc := range []struct {
		cases string
		want  string
	}{
		{"expired", "expired/chunked expired/unchunked expired/baseline"},
		{"unused,expired", "unused/chunked unused/unchunked unused/baseline expired/chunked expired/unchunked expired/baseline " +
			"combined/chunked combined/unchunked combined/baseline"},
	} {
		rep := runJSON(t, "-quick", "-keys", "1000", "-cases", tc.cases, "gc")
		var got []string
		for _, r := range rep.Results {
			got = append(got, r.Case+"/"+r.Variant)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("-cases %s: rows %v, want %s", tc.cases, got, tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-quick", "-cases", "unused,bogus", "gc"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), `"bogus"`) {
		t.Fatalf("an unknown case: exit %d, %q", code, errb.String())
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 2 {
		t.Fatalf("no scenario: exit %d, want 2", code)
	}
	if code := run([]string{"nosuch"}, &out, &errb); code != 2 {
		t.Fatalf("unknown scenario: exit %d, want 2", code)
	}
	if code := run([]string{"-clients", "1,x", "daemon"}, &out, &errb); code != 1 {
		t.Fatalf("bad client count: exit %d, want 1", code)
	}
	if code := run([]string{"-variants", "nosuch", "expiry"}, &out, &errb); code != 1 {
		t.Fatalf("unknown expiry variant: exit %d, want 1", code)
	}
}

// runAsRoot runs ukeybench -json with args and returns its report, or
// skips the test off Linux, without root (what says what the run is,
// why says why it needs root), or where the run fails saying one of
// notHere.
func runAsRoot(t *testing.T, what, why string, notHere []string, args ...string) report {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip(what + " needs Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip(what + " needs root: " + why)
	}
	var out, errb bytes.Buffer
	if code := run(append([]string{"-json"}, args...), &out, &errb); code != 0 {
		for _, s := range notHere {
			if strings.Contains(errb.String(), s) {
				t.Skipf("not here: %s", errb.String())
			}
		}
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// The tenants scenario, each phase short: every victim is served in
// every phase, and can still add a big_key, whatever the attacker holds;
// no uid of the attacker's user namespace gets a connection past its
// owner's bound.
func TestTenantsQuickShape(t *testing.T) {
	rep := runAsRoot(t, "the tenants scenario", "its processes run as other uids, in containers and a user namespace",
		[]string{"seccomp user notification", "needs unshare"}, "-quick", "-duration", "100ms", "-subuids", "3", "-costly-conns", "3", "tenants")
	rows := checkRows(t, rep, "tenants", []string{"idle", "cpu", "conns", "spin", "bigkey"}, []string{"host-user", "container"}, "us",
		"ops_per_s", "daemon_cpus", "errors", "big_key_add", "attacker")
	for name, r := range rows {
		if r.Extra["errors"].(float64) != 0 || r.Extra["big_key_add"] != "ok" {
			t.Errorf("%s: %v errors (%v), big_key add %v", name, r.Extra["errors"], r.Extra["first_error"], r.Extra["big_key_add"])
		}
		if _, ok := r.Extra["p99_vs_idle"]; !ok {
			t.Errorf("%s: no p99_vs_idle", name)
		}
	}
	perUID := rep.Params.(map[string]any)["limits"].(map[string]any)["MaxConnsPerUID"]
	if a := rows["conns/host-user"].Extra["attacker"].(string); !strings.Contains(a, fmt.Sprintf(`"accepted":%v,`, perUID)) || strings.Contains(a, "retries_accepted") {
		t.Errorf("the uids of one user namespace, against their owner's bound of %v connections: %s", perUID, a)
	}
	if a := rows["bigkey/host-user"].Extra["attacker"].(string); !strings.Contains(a, `"refused":"EDQUOT"`) {
		t.Errorf("the container filling big_key files: %s", a)
	}
}

// The density scenario gives the agent's commons and each count of idle
// namespaces, heap and goroutines; none has a goroutine of its own (a
// count, not a speed).
func TestDensityShape(t *testing.T) {
	rep := runJSON(t, "-idle", "1,50", "density")
	if rep.Scenario != "density" || len(rep.Results) != 6 {
		t.Fatalf("scenario %q with %d rows, want density with 6", rep.Scenario, len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Case != "first" && r.Variant == "goroutines" && r.Avg != 0 {
			t.Errorf("%s idle namespaces have %v goroutines each; want none", r.Case, r.Avg)
		}
	}
}

// The namespaces scenario, small: the measured container is served in
// every window, the idle containers are the agent's namespaces while
// they run (each costs goroutines), and each window after the first is
// compared with the baseline.
func TestNamespacesQuickShape(t *testing.T) {
	rep := runAsRoot(t, "the namespaces scenario", "its containers are pid and mount namespaces",
		[]string{"seccomp user notification"}, "-duration", "100ms", "-namespaces", "1,4", "namespaces")
	rows := checkRows(t, rep, "namespaces", []string{"namespaces-1", "namespaces-4", "namespaces-1-again"}, []string{"intercepted"}, "us",
		"calls_per_s", "daemon_cpus", "heap_kib", "goroutines")
	for _, name := range []string{"namespaces-4/intercepted", "namespaces-1-again/intercepted"} {
		if _, ok := rows[name].Extra["p50_vs_baseline"]; !ok {
			t.Errorf("%s: no p50_vs_baseline", name)
		}
	}
	if g1, g4 := rows["namespaces-1/intercepted"].Extra["goroutines"].(float64), rows["namespaces-4/intercepted"].Extra["goroutines"].(float64); g4 < g1 {
		t.Errorf("goroutines with 4 namespaces %v, with 1 %v", g4, g1)
	}
}
