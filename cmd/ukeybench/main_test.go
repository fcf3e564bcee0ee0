package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	if rep.Scenario != "gc" || len(rep.Results) != 9 {
		t.Fatalf("scenario %q with %d rows, want gc with 9", rep.Scenario, len(rep.Results))
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[r.Case+"/"+r.Variant] = true
		if r.Unit != "us" || r.N == 0 || r.Min > r.P50 || r.P50 > r.P999 || r.P999 > r.Max {
			t.Errorf("row %s/%s inconsistent: %+v", r.Case, r.Variant, r)
		}
		for _, k := range []string{"max_work_item_ms", "p999_work_item_ms", "reap_all_s"} {
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
	for _, c := range []string{"unused", "expired", "combined"} {
		for _, v := range []string{"chunked", "unchunked", "baseline"} {
			if !seen[c+"/"+v] {
				t.Errorf("missing row %s/%s", c, v)
			}
		}
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
}
