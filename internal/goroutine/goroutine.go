package goroutine

import (
	"bytes"
	"runtime"
	"strconv"
)

// ID returns the runtime's identifier of the calling goroutine.
func ID() int64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _ := parseHeader(buf[:n])
	return id
}

// parseHeader reads the id out of a "goroutine N [state]:" header.
func parseHeader(b []byte) (int64, bool) {
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(b, ' ')
	if end < 0 {
		return 0, false
	}
	id, err := strconv.ParseInt(string(b[:end]), 10, 64)
	if err != nil {
		return 0, false
	}
	return id, true
}

// Stacks returns the current stack trace of each goroutine in ids that is
// still alive, keyed by id. It stops the world briefly ([runtime.Stack] with
// all=true), so it belongs in reports that are rare by construction.
func Stacks(ids ...int64) map[int64]string {
	out := make(map[int64]string, len(ids))
	if len(ids) == 0 {
		return out
	}
	want := make(map[int64]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		if len(buf) >= 64<<20 {
			break // report what fits rather than grow without limit
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		id, ok := parseHeader(block)
		if ok && want[id] {
			out[id] = string(bytes.TrimRight(block, "\n"))
		}
	}
	return out
}
