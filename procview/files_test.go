package procview

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/keys"
)

func TestParseInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"300\n", 300, true}, {"  42 \t\n", 42, true}, {"-1\n", -1, true}, {"0", 0, true},
		{"", 0, false}, {"\n", 0, false}, {"-", 0, false}, {"1 2\n", 0, false}, {"0x10", 0, false},
		{"+5", 0, false}, {"12a", 0, false}, {"99999999999999999999", 0, false},
	} {
		v, err := ParseInt([]byte(c.in))
		if (err == nil) != c.ok || v != c.want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, ok %v", c.in, v, err, c.want, c.ok)
		}
	}
}

// What ParseInt takes, strconv takes too once the blanks are trimmed,
// to the same value.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"300\n", " -7 ", "", "1 2", "9223372036854775807", "-0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseInt(b)
		if err != nil {
			return
		}
		w, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || w != v {
			t.Fatalf("ParseInt(%q) = %d; strconv: %d, %v", b, v, w, err)
		}
	})
}

// The sysctl files show the namespace's tunables as the kernel's do,
// and a write sets one in that namespace only, within the kernel's
// range.
func TestSysctls(t *testing.T) {
	a, b := keys.New(), keys.New()
	defer a.Close()
	defer b.Close()
	want := map[string]string{"gc_delay": "300\n", "maxbytes": "20000\n", "maxkeys": "200\n",
		"persistent_keyring_expiry": "259200\n", "root_maxbytes": "25000000\n", "root_maxkeys": "1000000\n"}
	for _, name := range Sysctls {
		if got, ok := SysctlText(a.Tunables(), name); !ok || got != want[name] {
			t.Errorf("%s: %q", name, got)
		}
	}
	if err := SetSysctl(a, "maxkeys", 123); err != nil {
		t.Fatal(err)
	}
	if got, _ := SysctlText(a.Tunables(), "maxkeys"); got != "123\n" {
		t.Errorf("maxkeys after the write: %q", got)
	}
	if got, _ := SysctlText(b.Tunables(), "maxkeys"); got != "200\n" {
		t.Errorf("another namespace's maxkeys after the write: %q", got)
	}
	for _, v := range []int64{0, -1, 1 << 31} {
		if err := SetSysctl(a, "maxkeys", v); err != keys.EINVAL {
			t.Errorf("maxkeys %d: %v", v, err)
		}
	}
	if err := SetSysctl(a, "nosuch", 1); err != keys.ENOENT {
		t.Errorf("a sysctl that is none: %v", err)
	}
}
