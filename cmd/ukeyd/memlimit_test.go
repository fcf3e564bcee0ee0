package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/keys"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want memoryLimit
		bad  bool
	}{
		{in: "auto", want: memoryLimit{auto: true}},
		{in: " off ", want: memoryLimit{bytes: math.MaxInt64}},
		{in: "1000", want: memoryLimit{bytes: 1000}},
		{in: "1000B", want: memoryLimit{bytes: 1000}},
		{in: "4KiB", want: memoryLimit{bytes: 4096}},
		{in: "512MiB", want: memoryLimit{bytes: 512 << 20}},
		{in: "2GiB", want: memoryLimit{bytes: 2 << 30}},
		{in: "1TiB", want: memoryLimit{bytes: 1 << 40}},
		{in: "", bad: true},
		{in: "0", bad: true},
		{in: "-5MiB", bad: true},
		{in: "512MB", bad: true}, // GOMEMLIMIT's units are binary
		{in: "1.5GiB", bad: true},
		{in: "9000000TiB", bad: true}, // overflows
		{in: "MiB", bad: true},
	} {
		got, err := parseMemoryLimit(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v, bad %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

// The kernel's default quotas give root a million keys and 25,000,000
// bytes: 256 MB of keys at 256 bytes each beyond their bytes, twice over,
// and 64 MiB.
func TestQuotaMemoryLimit(t *testing.T) {
	if got, want := quotaMemoryLimit(keys.DefaultTunables()), int64(64<<20+2*(1_000_000*256+25_000_000)); got != want {
		t.Fatalf("quotaMemoryLimit(defaults) = %d, want %d", got, want)
	}
	tun := keys.DefaultTunables()
	tun.RootMaxKeys *= 2
	if got := quotaMemoryLimit(tun); got != 64<<20+2*(2_000_000*256+25_000_000) {
		t.Fatalf("quotaMemoryLimit with twice the keys = %d", got)
	}
}

// The daemon's Go memory limit follows -memory-limit: a size as given,
// off, GOMEMLIMIT where it is set, and otherwise the quotas, including
// when a sysctl write changes them.
func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		env, args []string
		want      string
	}{
		{args: []string{"-memory-limit", "300MiB"}, want: fmt.Sprint(300 << 20)},
		{env: []string{"UKEYD_MEMORY_LIMIT=off"}, want: "off"},
		{env: []string{"GOMEMLIMIT=123MiB"}, want: fmt.Sprint(123 << 20)},
		{env: []string{"GOMEMLIMIT=123MiB"}, args: []string{"-memory-limit", "1GiB"}, want: fmt.Sprint(1 << 30)},
		{want: fmt.Sprint(quotaMemoryLimit(keys.DefaultTunables()))},
	} {
		socket := filepath.Join(dir, fmt.Sprintf("ukeyd%d.sock", i))
		startChild(t, socket, childOpts{env: append([]string{"GOMEMLIMIT="}, tc.env...), args: tc.args})
		if got := statusField(t, socket, "memory_limit"); got != tc.want {
			t.Errorf("%v %v: memory_limit %s, want %s", tc.env, tc.args, got, tc.want)
		}
		if tc.env != nil || tc.args != nil {
			continue
		}
		// Automatic: a change of root's quota moves the limit.
		if os.Geteuid() != 0 {
			t.Log("not root: cannot write root_maxkeys to see the limit follow it")
			continue
		}
		c, err := client.Dial(socket)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetSysctl("root_maxkeys", "2000000"); err != nil {
			t.Fatal(err)
		}
		c.Close()
		tun := keys.DefaultTunables()
		tun.RootMaxKeys = 2_000_000
		if got, want := statusField(t, socket, "memory_limit"), fmt.Sprint(quotaMemoryLimit(tun)); got != want {
			t.Errorf("after root_maxkeys 2000000: memory_limit %s, want %s", got, want)
		}
	}
}

// FuzzParseMemoryLimit: any text either fails or gives auto, off, or a
// positive size that reads back the same when it was a plain number.
func FuzzParseMemoryLimit(f *testing.F) {
	for _, s := range []string{"auto", "off", "512MiB", "1", "0", "-1", "9223372036854775807", "8388608TiB", " 2GiB ", "KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMemoryLimit(s)
		if err != nil {
			return
		}
		if !m.auto && m.bytes < 1 {
			t.Fatalf("parseMemoryLimit(%q) = %+v", s, m)
		}
		if v := strings.TrimSpace(s); !m.auto && v != "off" && strings.TrimLeft(v, "0123456789") == "" && fmt.Sprint(m.bytes) != strings.TrimLeft(v, "+") {
			if strings.TrimLeft(v, "0") != fmt.Sprint(m.bytes) {
				t.Fatalf("parseMemoryLimit(%q) = %d", s, m.bytes)
			}
		}
	})
}
