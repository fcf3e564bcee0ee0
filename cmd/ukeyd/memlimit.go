package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/ukeys/ukeys/keys"
)

// The daemon's soft limit on Go's heap (GOMEMLIMIT), from its quota
// tunables. Quotas bound what users can make the daemon hold; the limit
// makes Go's collector work harder as the heap nears that bound, instead
// of letting it grow to twice the live heap as GOGC alone would. It does
// not shorten a collection: the keys must be marked all the same.

// keyHeapCost is the Go heap a key costs beyond the bytes its quota
// counts (description and payload): BenchmarkMillionKeys measures 247
// bytes for a user key, its keyring link and index slot included.
const keyHeapCost = 256

// memoryLimitBase is what the daemon holds besides keys: buffers, process
// and session records, the runtime's own.
const memoryLimitBase = 64 << 20

// quotaMemoryLimit is the limit the quota tunables imply: root's whole
// allowance, in keys and in bytes, and as much again for every other user
// together (the default allowance of a user is 200 keys and 20,000 bytes,
// a five-thousandth of root's), over memoryLimitBase.
func quotaMemoryLimit(t keys.Tunables) int64 {
	root := int64(t.RootMaxKeys)*keyHeapCost + int64(t.RootMaxBytes)
	return memoryLimitBase + 2*root
}

// memoryLimit is the -memory-limit setting.
type memoryLimit struct {
	auto  bool  // from the tunables, unless GOMEMLIMIT is set
	bytes int64 // otherwise; math.MaxInt64 is off
}

// parseMemoryLimit reads "auto", "off", or a size in GOMEMLIMIT's form:
// an integer of bytes with an optional unit, B, KiB, MiB, GiB or TiB.
func parseMemoryLimit(s string) (memoryLimit, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "auto":
		return memoryLimit{auto: true}, nil
	case "off":
		return memoryLimit{bytes: math.MaxInt64}, nil
	}
	num, shift := s, 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}} {
		if strings.HasSuffix(s, u.suffix) {
			num, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > math.MaxInt64>>shift {
		return memoryLimit{}, fmt.Errorf("%q is not auto, off, or a size such as 512MiB", s)
	}
	return memoryLimit{bytes: n << shift}, nil
}

// start applies a fixed limit; an automatic one it returns the hook that
// keeps it in step with the tunables (nil where GOMEMLIMIT rules).
func (m memoryLimit) start(log *slog.Logger) func(keys.Tunables) {
	switch {
	case !m.auto:
		debug.SetMemoryLimit(m.bytes)
		log.Debug("ukeyd: memory limit", "bytes", m.bytes)
		return nil
	case os.Getenv("GOMEMLIMIT") != "":
		log.Debug("ukeyd: memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return nil
	}
	return func(t keys.Tunables) {
		n := quotaMemoryLimit(t)
		debug.SetMemoryLimit(n)
		log.Debug("ukeyd: memory limit from the quotas", "bytes", n)
	}
}
