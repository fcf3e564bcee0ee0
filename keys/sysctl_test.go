package keys

import (
	"testing"
	"time"
)

// Every file of /proc/sys/kernel/keys reads back what was written to it,
// durations in seconds; a name that is no file, or a value beyond a C
// int, is refused as the kernel's write is.
func TestSysctlFilesRoundTrip(t *testing.T) {
	var tun Tunables
	for i, name := range SysctlNames {
		v := int64(100 + i)
		next, err := tun.WithSysctl(name, v)
		if err != nil {
			t.Fatalf("%s = %d: %v", name, v, err)
		}
		if got, ok := next.Sysctl(name); !ok || got != v {
			t.Errorf("%s reads %d, %t after writing %d", name, got, ok, v)
		}
		tun = next
	}
	if tun.GCDelay != 100*time.Second {
		t.Errorf("gc_delay 100 is %v", tun.GCDelay)
	}
	if _, err := tun.WithSysctl("nosuch", 1); err != ENOENT {
		t.Errorf("an unknown file: %v, want ENOENT", err)
	}
	if _, err := tun.WithSysctl("maxkeys", 1<<31); err != EINVAL {
		t.Errorf("a value beyond an int: %v, want EINVAL", err)
	}
	if _, ok := tun.Sysctl("nosuch"); ok {
		t.Error("an unknown file has a value")
	}
}
