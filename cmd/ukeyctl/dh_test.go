package main

import (
	"os"
	"os/exec"
	"testing"
)

// TestDHAgainstKernel runs testdata/dh.golden with the real keyctl against
// the kernel and compares each step with what the golden file says
// ukeyctl prints (TestGolden checks that half). dh.golden is not marked
// "#! compare" because most kernels (this machine's among them) are built
// without KEY_DH_OPERATIONS; where the kernel has it, this test runs.
func TestDHAgainstKernel(t *testing.T) {
	real := realKeyctl(t)
	if out, err := exec.Command(real, "supports", "dh_compute").CombinedOutput(); err != nil {
		t.Skipf("the kernel here has no Diffie-Hellman (CONFIG_KEY_DH_OPERATIONS): keyctl supports dh_compute: %v %s", err, out)
	}
	data, err := os.ReadFile("testdata/dh.golden")
	if err != nil {
		t.Fatal(err)
	}
	steps := parseGolden(t, string(data))
	kernel := runScript(t, steps, real, "")
	for i, s := range steps {
		want := s.Want.String()
		if kernel[i] == want {
			continue
		}
		if why, ok := s.Directive("kernel-differs"); ok {
			t.Logf("known difference (%s):\n$ %s\n--- keyctl\n%s--- ukeyctl\n%s", why, s.Cmd, kernel[i], want)
			continue
		}
		t.Errorf("$ %s\n--- keyctl (kernel)\n%s--- ukeyctl (dh.golden)\n%s", s.Cmd, kernel[i], want)
	}
}
