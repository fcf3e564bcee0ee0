package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ukeys/ukeys/internal/procs"
	"github.com/ukeys/ukeys/server"
)

// row is one line of results, in the shape scripts rely on.
type row struct {
	Case    string         `json:"case"`
	Variant string         `json:"variant"`
	Unit    string         `json:"unit"`
	N       int64          `json:"n"`
	Min     float64        `json:"min"`
	Avg     float64        `json:"avg"`
	Max     float64        `json:"max"`
	Var     float64        `json:"var"`
	P50     float64        `json:"p50"`
	P99     float64        `json:"p99"`
	P999    float64        `json:"p999"`
	Extra   map[string]any `json:"extra"`

	// hist holds the distribution behind the row (values in nanoseconds,
	// or picoseconds when div says so) for the CDF plots; div converts
	// its values to Unit.
	hist *hdrhistogram.Histogram
	div  float64
}

type report struct {
	Scenario string `json:"scenario"`
	Params   any    `json:"params"`
	Results  []row  `json:"results"`
	// notes are shown under the table (the stall report, for one).
	notes []string
}

var scenarios = []string{"gc", "gp", "stall", "read", "expiry", "daemon", "syscall", "handover", "tenants", "density", "namespaces"}

func main() {
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
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ukeybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keysN := fs.Int("keys", 1_000_000, "keys that become garbage (gc), or that the daemon handed over holds (handover)")
	chunk := fs.Int("chunk", 1024, "collector chunk size of the chunked variant (gc)")
	chunks := fs.String("chunks", "", "comma-separated chunk sizes: run the chunked variant once per size, then the baseline, instead of the three variants: the trade-off curve of the chunk budget (gc)")
	fg := fs.Int("foreground", 2, "foreground goroutines (gc, expiry)")
	traceDir := fs.String("trace", "", "write a runtime trace of each measuring window into this directory, one file per case and variant (gc)")
	itemCPU := fs.Bool("item-cpu", false, "measure each collector work item's CPU time, pinning the worker to its thread per item, which slows the scheduler's hand-offs (gc)")
	trials := fs.Int("trials", 60, "grace periods waited for by each poller; Synchronize gets ten times as many (gp)")
	maxDelay := fs.Duration("max-delay", time.Millisecond, "the holdout passes its quiescent state after a delay uniform in [0, max-delay) (gp)")
	loop := fs.Duration("loop", 5*time.Second, "length of the long loop (stall)")
	rounds := fs.Int("rounds", 3, "long loops run per variant (stall)")
	stallTimeout := fs.Duration("stall-timeout", time.Second, "grace-period age reported as a stall (stall)")
	duration := fs.Duration("duration", time.Second, "measuring time per cell (read), per case and variant (daemon), per phase (tenants; default 10s), or per window (namespaces; default 5s)")
	entries := fs.Int("entries", 1_000_000, "entries that expire at once (expiry)")
	setEvery := fs.Int("set-every", 4, "one foreground operation in this many is a Set, the others Gets; 0: Gets only (expiry)")
	only := fs.String("variants", "", "comma-separated subset of the variants to run (expiry, syscall; default all)")
	cases := fs.String("cases", "", "comma-separated subset of the cases to run: unused, expired, mixed (gc; default all; combined needs unused and expired)")
	window := fs.Duration("window", 0, "longest measurement after the expiry (expiry; default 4m, 12s with -quick)")
	clients := fs.String("clients", "1,4,16,64", "comma-separated client counts (daemon)")
	garbage := fs.Int("garbage", 500_000, "keys the collector reaps during the gc-busy variant (daemon)")
	callers := fs.String("callers", "1,4", "comma-separated counts of calling processes (syscall)")
	readers := fs.Int("readers", 16, "clients reading keys across the hand-over (handover)")
	rings := fs.Int("keyrings", 100, "keyrings the keys are spread over (handover)")
	phases := fs.String("phases", strings.Join(tenantPhases, ","), "comma-separated phases, in order (tenants; idle first gives the ratios)")
	interval := fs.Duration("interval", time.Millisecond, "each victim's pause between two reads; 0: as fast as it can (tenants)")
	costlyConns := fs.Int("costly-conns", 8, "the CPU attacker's connections (tenants)")
	subUIDs := fs.Int("subuids", 32, "uids of the connection attacker's user namespace (tenants)")
	retry := fs.Duration("retry", 10*time.Millisecond, "each of those uids' pause between attempts once at the bound (tenants)")
	spinEvery := fs.Duration("spin-every", 60*time.Microsecond, "the spinning attacker's request period (tenants)")
	idle := fs.String("idle", "1,1000", "comma-separated counts of idle key namespaces (density)")
	nsCounts := fs.String("namespaces", "1,1000", "comma-separated counts of key namespaces the agent holds in each window, the first the baseline, measured again at the end (namespaces)")
	quick := fs.Bool("quick", false, "small presets that finish each scenario in well under a minute")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	asMarkdown := fs.Bool("markdown", false, "print the table as Markdown")
	saveJSON := fs.String("save-json", "", "also write the JSON object to this file")
	plotDir := fs.String("plot", "", "write latency CDFs and bar charts into this directory")
	plotFormats := fs.String("plot-formats", "svg,png", "image formats of -plot (svg, png)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	mutexProfile := fs.String("mutexprofile", "", "write a profile of mutex contention during the run to this file")
	procsFlag := fs.String("procs", "", "Go processors of the run (GOMAXPROCS): auto (ukeyd's default, one more than Go's), go (Go's default) or a count; unset: auto for gc, daemon, tenants and namespaces, which measure what ukeyd runs, go for the others")
	blockProfile := fs.String("blockprofile", "", "write a profile of blocking (channels, mutexes, sleeps excluded) to this file")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ukeybench [flags] %s\n", strings.Join(scenarios, "|"))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// quickly lowers a size to its quick preset unless the flag was given.
	quickly := func(name string, v *int, q int) {
		if *quick && !set[name] {
			*v = q
		}
	}
	quicklyD := func(name string, v *time.Duration, q time.Duration) {
		if *quick && !set[name] {
			*v = q
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "ukeybench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "ukeybench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	// Where a foreground operation waited is the question a stall asks.
	for _, pf := range []struct {
		file, name string
		on, off    func()
	}{
		{*mutexProfile, "mutex", func() { runtime.SetMutexProfileFraction(1) }, func() { runtime.SetMutexProfileFraction(0) }},
		{*blockProfile, "block", func() { runtime.SetBlockProfileRate(1000) }, func() { runtime.SetBlockProfileRate(0) }},
	} {
		if pf.file == "" {
			continue
		}
		pf.on()
		defer func() {
			pf.off()
			if err := writeProfile(pf.name, pf.file); err != nil {
				fmt.Fprintln(stderr, "ukeybench:", err)
			}
		}()
	}
	procSetting := *procsFlag
	if procSetting == "" {
		procSetting = "go"
		if fs.Arg(0) == "gc" || fs.Arg(0) == "daemon" || fs.Arg(0) == "tenants" || fs.Arg(0) == "namespaces" {
			procSetting = "auto"
		}
	}
	procSet, err := procs.Parse(procSetting)
	if err != nil {
		fmt.Fprintln(stderr, "ukeybench: -procs", err)
		return 2
	}
	// run is called more than once in a process by the tests: leave
	// GOMAXPROCS as found.
	goProcs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(goProcs)
	gomaxprocs := procSet.Apply()
	prog := newProgress(stderr)
	loadBefore := loadAverage()
	var rep report
	switch fs.Arg(0) {
	case "gc":
		p := gcParams{Keys: *keysN, Chunk: *chunk, Foreground: *fg, ItemCPU: *itemCPU, TraceDir: *traceDir}
		if *quick {
			p.Keys = min(p.Keys, 20_000)
		}
		if *chunks != "" {
			if p.Chunks, err = parseInts(*chunks); err != nil {
				break
			}
			for _, c := range p.Chunks {
				if c <= 0 {
					err = fmt.Errorf("chunk size %d: want a positive budget (-chunk 0 is the unchunked variant)", c)
				}
			}
			if err != nil {
				break
			}
		}
		if *cases != "" {
			p.Cases = strings.Split(*cases, ",")
			for _, c := range p.Cases {
				if !slices.Contains(gcCases, c) {
					err = fmt.Errorf("gc case %q: want one of %s", c, strings.Join(gcCases, ", "))
				}
			}
			if err != nil {
				break
			}
		}
		var rows []row
		rows, err = runGC(p, prog.say)
		rep = report{Scenario: "gc", Params: p, Results: rows}
	case "gp":
		quickly("trials", trials, 4)
		p := gpParams{Trials: *trials, SyncTrials: 10 * *trials, MaxDelayMS: ms(*maxDelay)}
		rep, err = runGP(p, *maxDelay, prog)
	case "stall":
		quicklyD("loop", loop, 400*time.Millisecond)
		quickly("rounds", rounds, 2)
		quicklyD("stall-timeout", stallTimeout, 100*time.Millisecond)
		p := stallParams{LoopMS: ms(*loop), Rounds: *rounds, StallTimeoutMS: ms(*stallTimeout)}
		rep, err = runStall(p, *loop, *stallTimeout, prog)
	case "read":
		quicklyD("duration", duration, 50*time.Millisecond)
		p := readParams{DurationMS: ms(*duration), GOMAXPROCS: runtime.GOMAXPROCS(0)}
		rep, err = runRead(p, *duration, prog)
	case "expiry":
		quickly("entries", entries, 20_000)
		p := expiryParams{Entries: *entries, Foreground: *fg, Hot: 1024, SetEvery: *setEvery}
		if *quick {
			p.MinWindowMS, p.MaxWindowMS = 500, 12000
		} else {
			// The keys package's collector takes minutes to prune a
			// million expired links on a busy two-core machine.
			p.MinWindowMS, p.MaxWindowMS = 3000, 240000
		}
		if *window > 0 {
			p.MaxWindowMS = ms(*window)
			p.MinWindowMS = min(p.MinWindowMS, p.MaxWindowMS)
		}
		if *only != "" {
			p.Variants = strings.Split(*only, ",")
		}
		rep, err = runExpiry(p, prog)
	case "daemon":
		quicklyD("duration", duration, 200*time.Millisecond)
		quickly("garbage", garbage, 20_000)
		if *quick && !set["clients"] {
			*clients = "1,4"
		}
		var ks []int
		ks, err = parseInts(*clients)
		if err != nil {
			break
		}
		p := daemonParams{Clients: ks, DurationMS: ms(*duration), Garbage: *garbage}
		rep, err = runDaemon(p, *duration, prog)
	case "syscall":
		quicklyD("duration", duration, 200*time.Millisecond)
		var ks []int
		ks, err = parseInts(*callers)
		if err != nil {
			break
		}
		p := syscallParams{Callers: ks, DurationMS: ms(*duration)}
		if *only != "" {
			p.Variants = strings.Split(*only, ",")
		}
		rep, err = runSyscall(p, *duration, prog)
	case "handover":
		quickly("keys", keysN, 20_000)
		quicklyD("duration", duration, 200*time.Millisecond)
		p := handoverParams{Keys: *keysN, Keyrings: *rings, Clients: *readers, BeforeMS: ms(*duration), AfterMS: ms(*duration)}
		rep, err = runHandover(p, prog)
	case "tenants":
		if !set["duration"] {
			*duration = 10 * time.Second
		}
		quicklyD("duration", duration, 300*time.Millisecond)
		quickly("subuids", subUIDs, 4)
		p := tenantsParams{Phases: strings.Split(*phases, ","), DurationMS: ms(*duration), IntervalUS: float64(*interval) / 1e3,
			CostlyConns: *costlyConns, SubUIDs: *subUIDs, RetryMS: ms(*retry), SpinEveryUS: float64(*spinEvery) / 1e3,
			NoFile: server.NoFile(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoProcs: goProcs}
		for _, ph := range p.Phases {
			if !slices.Contains(tenantPhases, ph) {
				err = fmt.Errorf("tenants phase %q: want some of %s", ph, strings.Join(tenantPhases, ", "))
			}
		}
		if err != nil {
			break
		}
		rep, err = runTenants(p, *duration, *interval, prog)
	case "density":
		var ns []int
		if ns, err = parseInts(*idle); err != nil {
			break
		}
		rep, err = runDensity(densityParams{Namespaces: ns, TargetKiB: 64}, prog)
	case "namespaces":
		if !set["duration"] {
			*duration = 5 * time.Second
		}
		quicklyD("duration", duration, 300*time.Millisecond)
		if *quick && !set["namespaces"] {
			*nsCounts = "1,20"
		}
		var ns []int
		if ns, err = parseInts(*nsCounts); err != nil {
			break
		}
		p := namespacesParams{Counts: ns, DurationMS: ms(*duration)}
		rep, err = runNamespaces(p, *duration, prog)
	default:
		fmt.Fprintf(stderr, "ukeybench: unknown scenario %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "ukeybench:", err)
		return 1
	}
	if *plotDir != "" {
		if err := writePlots(*plotDir, strings.Split(*plotFormats, ","), rep); err != nil {
			fmt.Fprintln(stderr, "ukeybench:", err)
			return 1
		}
	}
	if *saveJSON != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(*saveJSON, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "ukeybench:", err)
			return 1
		}
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
	case *asMarkdown:
		// The machine is shared: say how busy it was, so that a reader
		// can tell a noisy run from a slow program.
		fmt.Fprintf(stdout, "Load average (1 min) %s before, %s after; GOMAXPROCS %d (-procs %s) on %d processors%s.\n\n",
			loadBefore, loadAverage(), gomaxprocs, procSet, runtime.NumCPU(), hugePages())
		printMarkdown(stdout, rep)
	default:
		printTable(stdout, rep)
		fmt.Fprintf(stdout, "\nGOMAXPROCS %d (-procs %s) on %d processors%s.\n", gomaxprocs, procSet, runtime.NumCPU(), hugePages())
	}
	return 0
}

func writeProfile(name, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAverage returns the one-minute load average, or "?" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// hugePages says how the host gives transparent huge pages ("; transparent
// huge pages: madvise"), nothing where it cannot tell: where a page
// fault is dear, the setting moves the gc scenario's long tails more than
// any change of ukeys' (docs/figures.md, "collector").
func hugePages() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), "[")
	mode, _, ok2 := strings.Cut(rest, "]")
	if !ok || !ok2 {
		return ""
	}
	return "; transparent huge pages: " + mode
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// extraOrder lists the extras the table shows first, in this order; any
// other extra follows in alphabetical order.
var extraOrder = []string{"max_work_item_ms", "p999_work_item_ms", "max_work_item_cpu_ms", "p999_work_item_cpu_ms", "reap_all_s", "stall_ms", "reap_done_ms",
	"ops_per_s", "stall_reports", "items"}

func extraKeys(r row) []string {
	var ks []string
	for _, k := range extraOrder {
		if _, ok := r.Extra[k]; ok {
			ks = append(ks, k)
		}
	}
	var rest []string
	for k, v := range r.Extra {
		if _, isStr := v.(string); !slices.Contains(extraOrder, k) && !isStr {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(ks, rest...)
}

// printTable prints the kernel patch's line per case (min/avg/max/var),
// then percentiles and the extras.
func printTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "scenario %s\n", rep.Scenario)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-13s %-14s min=%.3f avg=%.3f max=%.3f var=%.3f  p50=%.3f p99=%.3f p99.9=%.3f (%s, n=%d)",
			r.Case+":", r.Variant, r.Min, r.Avg, r.Max, r.Var, r.P50, r.P99, r.P999, r.Unit, r.N)
		var extras []string
		for _, k := range extraKeys(r) {
			extras = append(extras, fmt.Sprintf("%s=%s", k, fmtNum(r.Extra[k])))
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(extras, " "))
	}
	for _, n := range rep.notes {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(n, "\n"))
	}
}

// printMarkdown prints the rows as a Markdown table: what docs/figures.md
// holds.
func printMarkdown(w io.Writer, rep report) {
	if b, err := json.Marshal(rep.Params); err == nil {
		fmt.Fprintf(w, "Parameters: `%s`\n\n", b)
	}
	var cols []string
	for _, r := range rep.Results {
		for _, k := range extraKeys(r) {
			if !slices.Contains(cols, k) {
				cols = append(cols, k)
			}
		}
	}
	fmt.Fprintf(w, "| case | variant | unit | n | min | avg | p50 | p99 | p99.9 | max | %s |\n", strings.Join(cols, " | "))
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|%s\n", strings.Repeat("---|", len(cols)))
	for _, r := range rep.Results {
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |", r.Case, r.Variant, r.Unit, r.N,
			fmtFig(r.Min), fmtFig(r.Avg), fmtFig(r.P50), fmtFig(r.P99), fmtFig(r.P999), fmtFig(r.Max))
		for _, k := range cols {
			v, ok := r.Extra[k]
			if !ok {
				fmt.Fprint(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %s |", fmtNum(v))
		}
		fmt.Fprintln(w)
	}
	for _, n := range rep.notes {
		fmt.Fprintf(w, "\n```\n%s\n```\n", strings.TrimRight(n, "\n"))
	}
}

// fmtFig prints a figure with three significant digits, or as an integer
// when it is large.
func fmtFig(f float64) string {
	switch {
	case f >= 1000 || f <= -1000:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f == 0:
		return "0"
	default:
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
}

func fmtNum(v any) string {
	switch f := v.(type) {
	case float64:
		return fmtFig(f)
	case bool:
		return strconv.FormatBool(f)
	}
	return fmt.Sprint(v)
}
