// Command ukeybench reproduces the kernel measurements that shaped ukeys
// and runs each the old way and the new way in the same run, so that the
// result is a ratio that holds on a noisy machine.
//
// Usage:
//
//	ukeybench [flags] SCENARIO
//
// Scenarios:
//
//	gc   the keygcbench shape: N keys become garbage ("unused", "expired",
//	     "combined") while foreground goroutines add, read and search keys;
//	     the collector chunked, unchunked (ChunkSize 0, the kernel before
//	     the patch) and a baseline with nothing to reap.
//
// The other scenarios of the ukeybench issue (gp, stall, read, expiry,
// daemon) are not built yet.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
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
}

type report struct {
	Scenario string `json:"scenario"`
	Params   any    `json:"params"`
	Results  []row  `json:"results"`
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ukeybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keysN := fs.Int("keys", 1_000_000, "keys that become garbage (gc)")
	chunk := fs.Int("chunk", 1024, "collector chunk size of the chunked variant (gc)")
	fg := fs.Int("foreground", 2, "foreground goroutines adding, reading and searching keys")
	quick := fs.Bool("quick", false, "small preset that finishes in well under a minute")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ukeybench [flags] gc")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
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
	progress := func(s string) { fmt.Fprintf(stderr, "ukeybench: %s\n", s) }
	var rep report
	switch fs.Arg(0) {
	case "gc":
		p := gcParams{Keys: *keysN, Chunk: *chunk, Foreground: *fg}
		if *quick {
			p.Keys = min(p.Keys, 20_000)
		}
		rows, err := runGC(p, progress)
		if err != nil {
			fmt.Fprintln(stderr, "ukeybench:", err)
			return 1
		}
		rep = report{Scenario: "gc", Params: p, Results: rows}
	default:
		fmt.Fprintf(stderr, "ukeybench: unknown scenario %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		return 0
	}
	printTable(stdout, rep)
	return 0
}

// printTable prints the kernel patch's line per case (min/avg/max/var),
// then percentiles and the extras.
func printTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "scenario %s\n", rep.Scenario)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-9s %-10s min=%.3f avg=%.3f max=%.3f var=%.3f  p50=%.3f p99=%.3f p99.9=%.3f (%s, n=%d)",
			r.Case+":", r.Variant, r.Min, r.Avg, r.Max, r.Var, r.P50, r.P99, r.P999, r.Unit, r.N)
		var extras []string
		for _, k := range []string{"max_work_item_ms", "p999_work_item_ms", "reap_all_s", "stall_ms", "items"} {
			if v, ok := r.Extra[k]; ok {
				extras = append(extras, fmt.Sprintf("%s=%v", k, fmtNum(v)))
			}
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(extras, " "))
	}
}

func fmtNum(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.3f", f)
	}
	return fmt.Sprint(v)
}
